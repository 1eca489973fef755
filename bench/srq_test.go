package bench

import (
	"errors"
	"strings"
	"testing"

	"github.com/goroce/goroce/hca"
	"github.com/goroce/goroce/hca/link/memlink"
)

// TestUseSRQ runs the SEND modes with --use-srq: every message arrives
// through the one SRQ, to which each QP's buffers get RxDepth / QPs
// receives, and none through a QP's own receive queue.
func TestUseSRQ(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    Params
		msgs int // messages the server receives
	}{
		{"send_bw_rc_q4", Params{Mode: ModeSendBW, QPs: 4, Iters: 300, Size: 4096, RxDepth: 64}, 4 * 300},
		{"send_bw_ud_q3", Params{Mode: ModeSendBW, Conn: hca.UD, QPs: 3, Iters: 100, Size: 512}, 3 * 100},
		{"send_bw_uc_q2", Params{Mode: ModeSendBW, Conn: hca.UC, QPs: 2, Iters: 100, Size: 2048}, 2 * 100},
		{"send_bw_bidir_q2", Params{Mode: ModeSendBW, Duplex: true, QPs: 2, Iters: 200, Size: 8192, RxDepth: 32}, 2 * 200},
		{"send_lat", Params{Mode: ModeSendLat, Iters: 200, Size: 64}, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.p.UseSRQ = true
			da, db := memPair(t)
			cli, srv := connected(t, da, db, tc.p)
			if srv.srq == nil || cli.srq == nil {
				t.Fatal("--use-srq created no SRQ")
			}
			p := srv.Params()
			// runBoth, with a look at the queues between Ready and Run.
			for _, s := range []*Session{srv, cli} {
				if err := s.Ready(p.Size); err != nil {
					t.Fatal(err)
				}
			}
			share := min(p.RxDepth/p.QPs, p.Iters)
			if got := srv.srq.Len(); got != share*p.QPs {
				t.Fatalf("SRQ holds %d receives after Ready, want %d (%d per QP)", got, share*p.QPs, share)
			}
			err := srv.qps[0].qp.PostRecv(&hca.RecvWR{ID: 1, SGL: []hca.SGE{srv.qps[0].mr.SGE(0, 8)}})
			if err == nil {
				t.Fatal("a QP attached to the SRQ took a receive of its own")
			}
			ctx := testCtx(t)
			ch := make(chan error, 1)
			var rs Result
			go func() {
				var err error
				rs, err = srv.Run(ctx, p.Size)
				ch <- err
			}()
			rc, err := cli.Run(ctx, p.Size)
			if err != nil {
				t.Fatal(err)
			}
			if err := <-ch; err != nil {
				t.Fatal(err)
			}
			// One receive per message: nothing is left for a next size.
			if n := srv.srq.Len(); n != 0 {
				t.Fatalf("%d receives left in the SRQ after the run", n)
			}
			if tc.p.Mode.IsBW() {
				checkBW(t, rc, p.Size, p.Iters, p.QPs)
				got := 0
				for _, r := range srv.qps {
					got += r.rcnt // counted per buffer, as perftest's wr_id
				}
				if got != tc.msgs || rs.BW.Messages != tc.msgs {
					t.Fatalf("server received %d messages through the SRQ (result %d), want %d", got, rs.BW.Messages, tc.msgs)
				}
			} else {
				checkLat(t, rc, p.Size, p.Iters)
			}
		})
	}
}

// TestUseSRQRefusals: the SRQ belongs to the SEND tests, and each QP needs
// at least one receive of the RX depth.
func TestUseSRQRefusals(t *testing.T) {
	for _, tc := range []struct {
		p    Params
		want string
	}{
		{Params{Mode: ModeWriteBW, UseSRQ: true}, "only in the SEND tests"},
		{Params{Mode: ModeReadLat, UseSRQ: true}, "only in the SEND tests"},
		{Params{Mode: ModeSendBW, UseSRQ: true, QPs: 8, RxDepth: 4}, "-r must be at least -q"},
	} {
		err := tc.p.Normalize()
		if !errors.Is(err, ErrParams) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v --use-srq (q %d, r %d): error %v, want ErrParams saying %q", tc.p.Mode, tc.p.QPs, tc.p.RxDepth, err, tc.want)
		}
	}
}

// TestUseSRQAllSizes is -a with an SRQ of fewer receives than a size has
// messages (two per QP): each size's receives, sized for it, are posted at
// its Ready and reposted as they complete.
func TestUseSRQAllSizes(t *testing.T) {
	c, s := loopback(t, Params{Mode: ModeSendBW, All: true, MaxSize: 8192, Iters: 20, QPs: 3, RxDepth: 6, UseSRQ: true})
	if len(c.Results) != 13 || len(s.Results) != 13 {
		t.Fatalf("%d client and %d server results, want 13 (2..8192)", len(c.Results), len(s.Results))
	}
	for i, r := range c.Results {
		checkBW(t, r, 2<<i, 20, 3)
	}
}

// TestUseSRQUnderLoss: RC SENDs into an SRQ with few receives (RNR NAKs)
// over a link that loses, reorders and duplicates: every message arrives
// exactly once, and nothing is left in the SRQ or the receive CQ.
func TestUseSRQUnderLoss(t *testing.T) {
	da, db := memPairFaults(t, memlink.Faults{Loss: 0.02, Reorder: 0.02, Duplicate: 0.01})
	p := Params{Mode: ModeSendBW, QPs: 4, Iters: 200, Size: 3000, RxDepth: 8, UseSRQ: true}
	cli, srv := connected(t, da, db, p)
	rc, rs := runBoth(t, testCtx(t), cli, srv, p.Size)
	checkBW(t, rc, p.Size, p.Iters, p.QPs)
	if rs.BW.Messages != p.Iters*p.QPs {
		t.Fatalf("server counted %d messages, want %d", rs.BW.Messages, p.Iters*p.QPs)
	}
	if n := srv.srq.Len(); n != 0 {
		t.Fatalf("%d receives left in the SRQ", n)
	}
	if wcs, err := srv.rcq.Poll(srv.wcs); err != nil || wcs != 0 {
		t.Fatalf("%d more receive completions after the run (%v): a message arrived twice", wcs, err)
	}
	// The run went through what it is meant to: resends and RNR NAKs.
	var rexmit, rnr uint64
	for _, r := range cli.qps {
		st := r.qp.Stats()
		rexmit += st.TxRetransmits
		rnr += st.RNRNAKsReceived
	}
	if rexmit == 0 || rnr == 0 {
		t.Fatalf("%d packets resent, %d RNR NAKs: the faults did not bite", rexmit, rnr)
	}
	t.Logf("%d packets resent, %d RNR NAKs received", rexmit, rnr)
}
