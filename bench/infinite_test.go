package bench

import (
	"errors"
	"net"
	"strings"
	"testing"
	"time"
)

// TestInfinite runs --run_infinitely goroce against goroce: the client
// reports an interval at a time until Stop closes, then ends the exchange
// as a timed run does; the send_bw server learns of the end from the
// closing exchange and counts exactly the messages the client's intervals
// sum to (RC delivers each once), the write_bw server prints the client's
// last interval.
func TestInfinite(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for a second per mode")
	}
	for _, m := range []Mode{ModeSendBW, ModeWriteBW, ModeReadBW} {
		t.Run(m.String(), func(t *testing.T) {
			da, db := memPair(t)
			stop := make(chan struct{})
			var intervals []BWResult
			h := Hooks{Stop: stop, Result: func(_ *Report, r Result) {
				intervals = append(intervals, r.BW)
				if len(intervals) == 3 {
					close(stop)
				}
			}}
			p := Params{Mode: m, Infinite: true, Duration: 200 * time.Millisecond, Size: 4096}
			c, s, err := RunLoopback(testCtx(t), da, db, p, h)
			if err != nil {
				t.Fatal(err)
			}
			// Three full intervals, then the stretch to the stop.
			if len(intervals) != 4 || len(c.Results) != 4 {
				t.Fatalf("%d interval lines, %d results; want 4 (3 intervals and the last)", len(intervals), len(c.Results))
			}
			sum := 0
			for i, r := range intervals {
				if r.Messages <= 0 || r.Size != 4096 || r.PeakBytesPerSec != 0 {
					t.Fatalf("interval %d: %+v", i, r)
				}
				if i < 3 && (r.Duration < p.Duration || r.Duration > p.Duration+time.Second) {
					t.Fatalf("interval %d lasted %v, want about %v", i, r.Duration, p.Duration)
				}
				sum += r.Messages
			}
			srv := s.Results[0].BW
			switch m {
			case ModeSendBW:
				if srv.Messages != sum {
					t.Fatalf("server received %d messages, the client's intervals sum to %d", srv.Messages, sum)
				}
			default:
				if last := intervals[3]; srv.Messages != last.Messages {
					t.Fatalf("server printed %d messages, the client's last interval %d", srv.Messages, last.Messages)
				}
			}
		})
	}
}

// A client that goes away during an infinite run (the real tools end one
// by dying) ends it: the server returns its report, no error, and says
// what happened.
func TestInfinitePeerGone(t *testing.T) {
	for _, m := range []Mode{ModeSendBW, ModeWriteBW} {
		t.Run(m.String(), func(t *testing.T) {
			da, db := memPair(t)
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			p := Params{Mode: m, Infinite: true, Duration: 100 * time.Millisecond, Size: 1024}
			type out struct {
				rep    *Report
				err    error
				notice string
			}
			srv := make(chan out, 1)
			go func() {
				c, err := ln.Accept()
				if err != nil {
					srv <- out{err: err}
					return
				}
				defer c.Close()
				var notice strings.Builder
				r, err := RunPeer(testCtx(t), db, c, false, p, Hooks{Notice: &notice})
				srv <- out{r, err, notice.String()}
			}()
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			stop := make(chan struct{})
			// The client stops after its second interval and its
			// connection dies at its first word after that, as a killed
			// ib_send_bw's would (one killed mid-run leaves the server
			// the same closed connection).
			RunPeer(testCtx(t), da, &dyingConn{Conn: c, after: stop}, true, p, Hooks{Stop: stop, Result: func(*Report, Result) {
				if n++; n == 2 {
					close(stop)
				}
			}})
			o := <-srv
			if o.err != nil {
				t.Fatalf("server: %v", o.err)
			}
			if !strings.Contains(o.notice, "closing exchange") {
				t.Fatalf("server's notice %q does not say the run ended without the closing exchange", o.notice)
			}
			if m == ModeSendBW && (len(o.rep.Results) != 1 || o.rep.Results[0].BW.Messages == 0) {
				t.Fatalf("server results %+v, want its summary of the messages received", o.rep.Results)
			}
		})
	}
}

// dyingConn closes at its first Write once after has closed.
type dyingConn struct {
	net.Conn
	after <-chan struct{}
}

func (c *dyingConn) Write(b []byte) (int, error) {
	select {
	case <-c.after:
		c.Conn.Close()
		return 0, net.ErrClosed
	default:
		return c.Conn.Write(b)
	}
}

// An infinite client whose peer stops answering gives up on its WRs a
// while after the stop instead of waiting forever (retry count 7 retries
// forever).
func TestInfiniteDrainBounded(t *testing.T) {
	da, db := memPair(t)
	old := drainWait
	drainWait = 300 * time.Millisecond
	defer func() { drainWait = old }()
	p := Params{Mode: ModeWriteBW, Infinite: true, Duration: 50 * time.Millisecond, Size: 4096}
	cli, srv := connected(t, da, db, p)
	if err := cli.Ready(4096); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	cli.Stop = stop
	n := 0
	cli.Interval = func(BWResult) {
		if n++; n == 1 {
			srv.Close() // the responder's QPs go: nothing answers any more
			close(stop)
		}
	}
	if _, err := cli.Run(testCtx(t), 4096); !errors.Is(err, ErrStalled) {
		t.Fatalf("Run after the peer went: %v, want ErrStalled", err)
	}
}

func TestInfiniteParams(t *testing.T) {
	for _, tc := range []struct {
		p    Params
		want string
	}{
		{Params{Mode: ModeSendLat, Infinite: true}, "only in BW tests"},
		{Params{Mode: ModeSendBW, Infinite: true, Duplex: true}, "SEND Bidirectional"},
		{Params{Mode: ModeWriteBW, Infinite: true, Duplex: true}, "-b"},
		{Params{Mode: ModeWriteBW, Infinite: true, All: true}, "-a"},
	} {
		err := tc.p.Normalize()
		if !errors.Is(err, ErrParams) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want ErrParams saying %q", tc.p, err, tc.want)
		}
	}
	p := Params{Mode: ModeWriteBW, Infinite: true}
	if err := p.Normalize(); err != nil || p.Duration != 5*time.Second || !p.NoPeak {
		t.Fatalf("default interval %v, no peak %v, err %v; want 5 s (DEF_DURATION), true", p.Duration, p.NoPeak, err)
	}
}

// sentThrough carries the send count across 2^32 WRs, where the WR ID's
// low 32 bits wrap.
func TestSentThrough(t *testing.T) {
	for _, tc := range []struct {
		ccnt int
		wrid uint64
		want int
	}{
		{0, 0, 1},
		{0, 99, 100},
		{100, 1<<32 | 199, 200},
		{1<<32 - 10, 1<<32 - 1, 1 << 32},
		{1<<32 - 10, 4, 1<<32 + 5},
		{5<<32 + 7, 3<<32 | 107, 5<<32 + 108},
	} {
		if got := sentThrough(tc.ccnt, tc.wrid); got != tc.want {
			t.Errorf("sentThrough(%d, %#x) = %d, want %d", tc.ccnt, tc.wrid, got, tc.want)
		}
	}
}
