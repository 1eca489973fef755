package bench

import (
	"errors"
	"strings"
	"testing"
)

// --reversed: the side that waited for the TCP connection (RunLoopback's
// server) runs the test and the side that dialed is passive; the bytes go
// from the listener to the dialer, the dialer prints the sender's figures
// (write/read: the report it was sent; send: its own receive count), and
// each report takes the test's role for its header.
func TestReversed(t *testing.T) {
	const size, iters = 16384, 200
	for _, tc := range []struct {
		mode Mode
		qps  int
	}{
		{ModeWriteBW, 1},
		{ModeSendBW, 2},
		{ModeReadBW, 1},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			da, db := memPair(t) // da dials (client), db listens
			p := Params{Mode: tc.mode, Size: size, Iters: iters, QPs: tc.qps, Reversed: true}
			var hooked *Report // RunLoopback hands the hooks to the side that runs the test
			c, s, err := RunLoopback(testCtx(t), da, db, p, Hooks{Connected: func(r *Report) { hooked = r }})
			if err != nil {
				t.Fatal(err)
			}
			if hooked != s {
				t.Fatalf("the hooks went to the dialer's report, not to the listener's that runs the test")
			}
			if c.Client || !s.Client {
				t.Fatalf("test roles: dialer Client=%v, listener Client=%v; want the listener to run the test", c.Client, s.Client)
			}
			checkBW(t, s.Results[0], size, iters, tc.qps)
			checkBW(t, c.Results[0], size, iters, tc.qps)
			// The payload crosses from the listener's device to the
			// dialer's (a READ's responses come back to the reader).
			payload := uint64(size * iters * tc.qps)
			from, to := db, da
			if tc.mode == ModeReadBW {
				from, to = da, db
			}
			if tx, rx := from.Counters.TxBytes.Load(), to.Counters.TxBytes.Load(); tx < payload || rx >= payload {
				t.Fatalf("bytes sent: %d by the side that should carry the payload, %d by the other; want at least %d and far less", tx, rx, payload)
			}
		})
	}
	for _, m := range []Mode{ModeSendLat, ModeReadLat} {
		p := Params{Mode: m, Reversed: true}
		if err := p.Normalize(); !errors.Is(err, ErrParams) || !strings.Contains(err.Error(), "bandwidth tests only") {
			t.Errorf("%v --reversed: %v", m, err)
		}
	}
	p := Params{Mode: ModeWriteBW, Reversed: true, Infinite: true}
	if err := p.Normalize(); !errors.Is(err, ErrParams) {
		t.Errorf("--reversed --run_infinitely: %v", err)
	}
}
