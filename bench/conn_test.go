package bench

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/hca"
	"github.com/goroce/goroce/hca/link/memlink"
)

// TestUnreliableConn runs perftest's -c UC and -c UD modes goroce against
// goroce over the TCP exchange: the QPs are of that type, every message
// arrives (the in-memory link loses none) and the header says so.
func TestUnreliableConn(t *testing.T) {
	for _, tc := range []struct {
		p    Params
		size int
	}{
		{Params{Mode: ModeSendBW, Conn: hca.UC, Iters: 200, Size: 5000}, 5000},
		{Params{Mode: ModeWriteBW, Conn: hca.UC, Iters: 200, Size: 9000}, 9000},
		{Params{Mode: ModeSendLat, Conn: hca.UC, Iters: 50}, 2},
		{Params{Mode: ModeWriteLat, Conn: hca.UC, Iters: 50, Size: 4097}, 4097},
		{Params{Mode: ModeSendBW, Conn: hca.UD, Iters: 200, Size: 1000}, 1000},
		{Params{Mode: ModeSendBW, Conn: hca.UD, Iters: 200, QPs: 3, Size: 4096}, 4096},
		{Params{Mode: ModeSendLat, Conn: hca.UD, Iters: 50}, 2},
		{Params{Mode: ModeSendBW, Conn: hca.UD, Iters: 100, Size: 512, Duplex: true}, 512},
	} {
		name := tc.p.Conn.String() + "/" + tc.p.Mode.String()
		if tc.p.Duplex {
			name += "/bidir"
		}
		t.Run(name, func(t *testing.T) {
			da, db := memPair(t)
			var text strings.Builder
			c, s, err := RunLoopback(testCtx(t), da, db, tc.p, Hooks{Connected: func(r *Report) { PrintHeader(&text, r) }})
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(text.String(), " Connection type : "+tc.p.Conn.String()+"\t") {
				t.Fatalf("header does not name %v:\n%s", tc.p.Conn, text.String())
			}
			qps := max(tc.p.QPs, 1)
			if tc.p.Mode.IsBW() {
				checkBW(t, c.Results[0], tc.size, tc.p.Iters, qps)
				if !tc.p.Duplex {
					checkBW(t, s.Results[0], tc.size, tc.p.Iters, qps)
				}
			} else {
				checkLat(t, c.Results[0], tc.size, tc.p.Iters)
			}
			if j := ToJSON(c); j.Conn != tc.p.Conn.String() {
				t.Fatalf("--json connection %q, want %v", j.Conn, tc.p.Conn)
			}
			for i, d := range s.Local {
				if got := c.Remote[i].QPN; got != d.QPN {
					t.Fatalf("QP %d: client connected to 0x%06x, server's is 0x%06x", i, got, d.QPN)
				}
			}
		})
	}
}

// The QPs are really UC and UD (not RC under another name), with
// perftest's Q_Key, and the bytes land where perftest's would: a UD
// receive starts with the 40-byte GRH, the payload on a cache line.
func TestUnreliableConnData(t *testing.T) {
	const size, iters = 1000, 20
	for _, conn := range []hca.QPType{hca.UC, hca.UD} {
		t.Run(conn.String(), func(t *testing.T) {
			da, db := memPair(t)
			p := Params{Mode: ModeSendBW, Conn: conn, Size: size, Iters: iters}
			cli, srv := connected(t, da, db, p)
			for _, s := range []*Session{cli, srv} {
				if typ := s.qps[0].qp.Type(); typ != conn {
					t.Fatalf("QP type %v, want %v", typ, conn)
				}
			}
			if conn == hca.UD {
				if a, _ := srv.qps[0].qp.Query(); a.QKey != qkey {
					t.Fatalf("server Q_Key %#x, want %#x", a.QKey, qkey)
				}
			}
			cb := cli.qps[0].mr.Bytes()
			fill(cb[:size], 3)
			want := append([]byte(nil), cb[:size]...)
			runBoth(t, testCtx(t), cli, srv, size)
			off := srv.bufSize
			if conn == hca.UD {
				off += defaultCacheLine // after the GRH
			}
			got := make([]byte, size)
			if err := srv.qps[0].qp.ReadMR(srv.qps[0].mr, off, got); err != nil || !bytes.Equal(got, want) {
				t.Fatalf("the server's buffer at %d does not hold the client's bytes (%v)", off, err)
			}
		})
	}
}

// perftest's check_mtu for UD: a default size (and -a) shrinks to the
// MTU with a notice; -a runs 2..MTU; an explicit size above the MTU is an
// error; one at or under it stays.
func TestUDSize(t *testing.T) {
	da, db := memPair(t)
	mtu := min(da.QueryPort().ActiveMTU, db.QueryPort().ActiveMTU).Bytes()
	var notice strings.Builder
	c, _, err := RunLoopback(testCtx(t), da, db, Params{Mode: ModeSendBW, Conn: hca.UD, Iters: 200}, Hooks{Notice: &notice})
	if err != nil {
		t.Fatal(err)
	}
	if c.Params.Size != mtu || c.Results[0].BW.Size != mtu {
		t.Fatalf("default size became %d (ran %d), want the MTU %d", c.Params.Size, c.Results[0].BW.Size, mtu)
	}
	if want := " Max msg size in UD is MTU "; !strings.HasPrefix(notice.String(), want) {
		t.Fatalf("notice %q, want it to start %q", notice.String(), want)
	}
	// perftest keeps CQ moderation 100 for UD at the default size.
	if c.Params.CQMod != DefaultCQMod {
		t.Fatalf("UD CQ moderation %d, want %d", c.Params.CQMod, DefaultCQMod)
	}

	c, _, err = RunLoopback(testCtx(t), da, db, Params{Mode: ModeSendBW, Conn: hca.UD, All: true, Iters: 10}, Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(c.Results); n == 0 || c.Results[n-1].BW.Size != mtu || c.Results[0].BW.Size != 2 {
		t.Fatalf("-a over UD ran %d sizes, last %d; want 2..%d", n, c.Results[n-1].BW.Size, mtu)
	}

	_, _, err = RunLoopback(testCtx(t), da, db, Params{Mode: ModeSendBW, Conn: hca.UD, Size: mtu + 1, Iters: 10}, Hooks{})
	if !errors.Is(err, ErrParams) || !strings.Contains(err.Error(), "cannot be greater than MTU") {
		t.Fatalf("-s %d over UD with MTU %d: %v", mtu+1, mtu, err)
	}
	c, _, err = RunLoopback(testCtx(t), da, db, Params{Mode: ModeSendLat, Conn: hca.UD, Size: mtu, Iters: 10}, Hooks{})
	if err != nil || c.Results[0].Lat.Size != mtu {
		t.Fatalf("send_lat -s %d over UD: %v", mtu, err)
	}
}

// perftest's refusals (change_conn_type) and its UC/UD RX depth.
func TestConnParams(t *testing.T) {
	for _, p := range []Params{
		{Mode: ModeReadBW, Conn: hca.UC},
		{Mode: ModeAtomicBW, Conn: hca.UC},
		{Mode: ModeReadLat, Conn: hca.UC},
		{Mode: ModeWriteBW, Conn: hca.UD},
		{Mode: ModeWriteLat, Conn: hca.UD},
		{Mode: ModeReadBW, Conn: hca.UD},
		{Mode: ModeSendBW, Conn: 9},
	} {
		if err := p.Normalize(); !errors.Is(err, ErrParams) {
			t.Errorf("%v over %v: %v, want ErrParams", p.Mode, p.Conn, err)
		}
	}
	for s, want := range map[string]hca.QPType{"RC": hca.RC, "uc": hca.UC, "Ud": hca.UD} {
		if got, err := ParseConn(s); err != nil || got != want {
			t.Errorf("ParseConn(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	if _, err := ParseConn("XRC"); !errors.Is(err, ErrParams) {
		t.Errorf("ParseConn(XRC): %v, want ErrParams", err)
	}
	for _, tc := range []struct {
		p    Params
		want int
	}{
		{Params{Mode: ModeSendBW}, DefaultRxDepth},
		{Params{Mode: ModeSendBW, Conn: hca.UD}, 1000},
		{Params{Mode: ModeSendBW, Conn: hca.UC, Iters: 50000}, maxRxUnreliable},
		{Params{Mode: ModeSendBW, Conn: hca.UD, RxDepth: 64}, 64},
		{Params{Mode: ModeSendBW, Conn: hca.UD, Duration: time.Second}, DefaultRxDepth},
	} {
		p := tc.p
		if err := p.Normalize(); err != nil {
			t.Fatal(err)
		}
		// Normalize twice (RunPeer's copy and NewSession's) changes nothing.
		q := p
		if err := q.Normalize(); err != nil || q != p {
			t.Fatalf("second Normalize: %+v, %v; want %+v", q, err, p)
		}
		if p.RxDepth != tc.want {
			t.Errorf("%+v: RX depth %d, want %d", tc.p, p.RxDepth, tc.want)
		}
	}
}

// A UC or UD server whose messages stop arriving (lost: nothing resends
// them) gives up and says how many came, rather than waiting forever.
func TestUnreliableStall(t *testing.T) {
	saved := unreliableStall
	unreliableStall = 300 * time.Millisecond
	t.Cleanup(func() { unreliableStall = saved })
	da, db := memPairFaults(t, memlink.Faults{Loss: 0.2})
	cli, srv := connected(t, da, db, Params{Mode: ModeSendBW, Conn: hca.UD, Size: 256, Iters: 200})
	if err := srv.Ready(256); err != nil {
		t.Fatal(err)
	}
	if err := cli.Ready(256); err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	ch := make(chan error, 1)
	go func() {
		_, err := srv.Run(ctx, 256)
		ch <- err
	}()
	if _, err := cli.Run(ctx, 256); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-ch:
		if !errors.Is(err, ErrStalled) || !strings.Contains(err.Error(), "of 200") {
			t.Fatalf("server with 20%% of the messages lost: %v, want ErrStalled with the count", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the server is still waiting for lost UD messages")
	}
}

// Either side of a UC or UD latency test whose message is lost gives up
// with ErrStalled instead of waiting forever for an answer that cannot
// come.
func TestUnreliableLatStall(t *testing.T) {
	saved := unreliableStall
	unreliableStall = 300 * time.Millisecond
	t.Cleanup(func() { unreliableStall = saved })
	for _, tc := range []struct {
		conn hca.QPType
		mode Mode
	}{{hca.UD, ModeSendLat}, {hca.UC, ModeSendLat}, {hca.UC, ModeWriteLat}} {
		t.Run(tc.conn.String()+"/"+tc.mode.String(), func(t *testing.T) {
			da, db := memPairFaults(t, memlink.Faults{Loss: 0.3})
			cli, srv := connected(t, da, db, Params{Mode: tc.mode, Conn: tc.conn, Iters: 500})
			for _, s := range []*Session{srv, cli} {
				if err := s.Ready(2); err != nil {
					t.Fatal(err)
				}
			}
			ctx := testCtx(t)
			errs := make(chan error, 2)
			for _, s := range []*Session{srv, cli} {
				go func() {
					_, err := s.Run(ctx, 2)
					errs <- err
				}()
			}
			for range 2 {
				select {
				case err := <-errs:
					if !errors.Is(err, ErrStalled) {
						t.Fatalf("a side with 30%% of one direction lost: %v, want ErrStalled", err)
					}
				case <-time.After(20 * time.Second):
					t.Fatal("a side still waits for a lost message")
				}
			}
		})
	}
}
