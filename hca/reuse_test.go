package hca_test

import (
	"bytes"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/hca"
	"github.com/goroce/goroce/hca/link/memlink"
	"github.com/goroce/goroce/transport"
)

// TestQPReuseAfterReset: two connected RC QPs carry SENDs and WRITEs, one
// end is moved to RESET while its peer's packets keep arriving, then the
// other, and both are connected again with new PSNs, three times. Each life
// must move data as the first did: the engine state, path, receive queue
// and the device's bookkeeping (sender window, shard lists) all follow the
// QP through RESET.
func TestQPReuseAfterReset(t *testing.T) {
	f := memlink.Faults{Loss: 0.02, Reorder: 0.02}
	da, db := pair(t, memlink.Config{Seed: 3, AtoB: f, BtoA: f, QueueLen: 4096})
	rcTimeout = 10
	defer func() { rcTimeout = 14 }()
	const size = 16 << 10
	a := newEnd(t, da, hca.RC, 2*size, allAccess)
	b := newEnd(t, db, hca.RC, 2*size, allAccess)
	for life := 0; life < 3; life++ {
		connect(t, a, b, bth.MTU1024, bth.PSN(0xFFFF00+life*7)&bth.PSNMask, bth.PSN(life*1000))
		// A full message both ways, checked.
		for i := 0; i < 20; i++ {
			ln := 1 + (i*997+life*31)%size
			fill(a.buf[:ln], byte(i+life))
			if err := b.qp.PostRecv(&hca.RecvWR{ID: uint64(i), SGL: []hca.SGE{b.mr.SGE(size, size)}}); err != nil {
				t.Fatalf("life %d: %v", life, err)
			}
			if err := a.qp.PostSend(&hca.SendWR{ID: uint64(i), Opcode: transport.WRSend, Flags: transport.SendSignaled,
				SGL: []hca.SGE{a.mr.SGE(0, ln)}}); err != nil {
				t.Fatalf("life %d: %v", life, err)
			}
			if wc := waitWC(t, a.cq); wc.Status != transport.StatusSuccess || wc.WRID != uint64(i) {
				t.Fatalf("life %d send %d: %+v", life, i, wc)
			}
			if wc := waitWC(t, b.cq); wc.Status != transport.StatusSuccess || wc.WRID != uint64(i) || wc.ByteLen != uint32(ln) {
				t.Fatalf("life %d recv %d: %+v", life, i, wc)
			}
			if !bytes.Equal(b.buf[size:size+ln], a.buf[:ln]) {
				t.Fatalf("life %d msg %d: data differs", life, i)
			}
			wr := hca.SendWR{ID: 1000 + uint64(i), Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
				SGL: []hca.SGE{b.mr.SGE(0, ln)}, RemoteAddr: a.mr.Addr() + size, RKey: a.mr.RKey()}
			fill(b.buf[:ln], byte(3*i+life))
			if err := b.qp.PostSend(&wr); err != nil {
				t.Fatalf("life %d: %v", life, err)
			}
			if wc := waitWC(t, b.cq); wc.Status != transport.StatusSuccess || wc.WRID != wr.ID {
				t.Fatalf("life %d write %d: %+v", life, i, wc)
			}
			if !bytes.Equal(a.buf[size:size+ln], b.buf[:ln]) {
				t.Fatalf("life %d write %d: data differs", life, i)
			}
		}
		// Leave a pipe full of unacknowledged WRITEs from a, then reset b
		// under them, then a; what a's CQ got meanwhile is of the old life.
		for i := 0; i < 64; i++ {
			if err := a.qp.PostSend(&hca.SendWR{ID: 5000 + uint64(i), Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
				SGL: []hca.SGE{a.mr.SGE(0, size)}, RemoteAddr: b.mr.Addr() + size, RKey: b.mr.RKey()}); err != nil {
				t.Fatalf("life %d: %v", life, err)
			}
		}
		toReset(t, b.qp)
		toReset(t, a.qp)
		drain := make([]hca.WC, 128)
		for _, cq := range []*hca.CQ{a.cq, b.cq} {
			for {
				n, err := cq.Poll(drain)
				if err != nil {
					t.Fatal(err)
				}
				if n == 0 {
					break
				}
			}
		}
		if s := a.qp.State(); s != hca.StateReset {
			t.Fatalf("life %d: a in %s after RESET", life, s)
		}
	}
}
