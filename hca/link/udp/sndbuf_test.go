//go:build linux

package udp

import (
	"errors"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/goroce/goroce/hca/link"
	"github.com/goroce/goroce/hca/link/linktest"
	"github.com/goroce/goroce/wire"
)

// shapeLo puts a token bucket of rate bytes/s on the namespace's lo, which
// has no queue of its own: sent packets then wait in it, still charged to
// their socket's send buffer, and a small buffer fills (EAGAIN).
func shapeLo(t *testing.T, ns *netNS, rate uint64) {
	t.Helper()
	ns.do(t, func() {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			t.Fatal(err)
		}
		const burst = 4096
		q := &netlink.Tbf{
			QdiscAttrs: netlink.QdiscAttrs{LinkIndex: lo.Attrs().Index, Handle: netlink.MakeHandle(1, 0), Parent: netlink.HANDLE_ROOT},
			Rate:       rate, Limit: 1 << 20, Buffer: netlink.Xmittime(rate, burst),
		}
		if err := netlink.QdiscAdd(q); err != nil {
			t.Skipf("tbf qdisc on lo: %v", err)
		}
	})
}

// fullSendBufModes are the send paths that wait for room in a socket
// buffer: in the netpoller and in ppoll, connected and unconnected. No
// GSO: each frame is its own skb, so the smallest buffer fills after a few.
var fullSendBufModes = []struct {
	name string
	mod  func(*Config)
}{
	{"unconnected", func(c *Config) { c.NoConnect = true }},
	{"connected", nil},
	{"busypoll", func(c *Config) { c.BusyPoll = true }},
	{"plain-busypoll", func(c *Config) { c.PlainIPv4 = true; c.BusyPoll = true }},
}

// TestFullSendBuffer: a Write that finds the socket buffer full (sendmmsg
// takes part of the batch, then EAGAIN) waits for room and sends the rest;
// every frame arrives once, in order.
func TestFullSendBuffer(t *testing.T) {
	for _, tc := range fullSendBufModes {
		t.Run(tc.name, func(t *testing.T) {
			ns := newNetNS(t)
			shapeLo(t, ns, 2<<20)
			a, b := openPair(t, ns, "127.0.0.1", "127.0.0.2", func(c *Config) {
				c.NoGSO, c.SendBuf = true, 1
				if tc.mod != nil {
					tc.mod(c)
				}
			})
			defer a.Close()
			defer b.Close()
			const n = 64
			if w, err := a.Write(mustFrames(t, a, b, 0, n, 1000), 0); w != n || err != nil {
				t.Fatalf("Write = %d, %v; want %d (stats %+v)", w, err, n, a.Stats())
			}
			readFrames(t, b, n, func(got int, p *wire.Packet) {
				if int(p.BTH().PSN()) != got {
					t.Fatalf("frame %d has PSN %d", got, p.BTH().PSN())
				}
			})
			if st := a.Stats(); st.TxFrames != n || st.TxErrors != 0 {
				t.Fatalf("stats %+v: want %d frames sent, no error", st, n)
			}
		})
	}
}

// TestCloseUnblocksWrite: Close ends a Write waiting for room in a full
// socket buffer with link.ErrClosed, and a second Close is harmless.
func TestCloseUnblocksWrite(t *testing.T) {
	for _, tc := range fullSendBufModes {
		t.Run(tc.name, func(t *testing.T) {
			ns := newNetNS(t)
			shapeLo(t, ns, 1000) // a 1000-byte frame a second
			a, b := openPair(t, ns, "127.0.0.1", "127.0.0.2", func(c *Config) {
				c.NoGSO, c.SendBuf = true, 1
				if tc.mod != nil {
					tc.mod(c)
				}
			})
			defer b.Close()
			const n = 64
			fs := mustFrames(t, a, b, 0, n, 1000)
			type result struct {
				n   int
				err error
			}
			done := make(chan result, 1)
			before := a.Stats().TxCalls
			go func() {
				w, err := a.Write(fs, 0)
				done <- result{w, err}
			}()
			// Wait until the Write has met the full buffer: a second
			// sendmmsg (the first took what fitted) without the Write
			// having returned.
			deadline := time.Now().Add(linktest.Timeout)
			for a.Stats().TxCalls < before+2 && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			select {
			case r := <-done:
				t.Fatalf("Write returned %d, %v before Close (stats %+v)", r.n, r.err, a.Stats())
			default:
			}
			a.Close()
			select {
			case r := <-done:
				if r.n >= n || !errors.Is(r.err, link.ErrClosed) {
					t.Fatalf("blocked Write = %d, %v; want fewer than %d frames and link.ErrClosed", r.n, r.err, n)
				}
			case <-time.After(linktest.Timeout):
				t.Fatal("Close did not end a Write waiting for room")
			}
			if err := a.Close(); err != nil {
				t.Fatalf("second Close: %v", err)
			}
			if _, err := a.Write(fs[:1], 0); !errors.Is(err, link.ErrClosed) {
				t.Fatalf("Write after Close: %v, want link.ErrClosed", err)
			}
		})
	}
}
