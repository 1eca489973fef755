package transport_test

import (
	"bytes"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/transport"
)

// TestHostileMisalignedAtomic: a peer's COMPARE_SWAP or FETCH_ADD whose VA
// is not 8-byte aligned (our PostSend never sends one, so it is forged
// here) is refused with a NAK invalid request (IBA atomics act on an
// aligned 64-bit word; rxe: RESPST_ERR_MISALIGNED_ATOMIC), the responder's
// QP enters ERR and no byte of the region changes, even when the key and
// range are valid.
func TestHostileMisalignedAtomic(t *testing.T) {
	for _, op := range []bth.Opcode{bth.OpRCCompareSwap, bth.OpRCFetchAdd} {
		for _, off := range []uint64{1, 4, 7, 64 - 4} {
			p := newPair(t, pairOpt{typ: transport.RC})
			mr := p.mem.Register(2, 64, allAccess)
			fill(mr.Buf, 3)
			guard := append([]byte(nil), mr.Buf...)
			oi := op.Info()
			pkt := make([]byte, oi.HdrLen)
			bth.Header(pkt).Encode(&bth.Fields{Opcode: op, PKey: bth.DefaultPKey, DestQP: 0x22, PSN: 0, AckReq: true})
			a := bth.AtomicETH(pkt[oi.AtomicETH:])
			a.SetVA(mr.Addr + off)
			a.SetRKey(mr.RKey)
			a.SetSwapAdd(0x0101010101010101)
			// The compare value the bytes hold, so a swap would happen.
			a.SetCompare(^uint64(0))
			deliver(p.b.QP, 0, pkt)
			out := xmit(p.b.QP, 0)
			want := "RC_ACKNOWLEDGE@0x000000(" + bth.NAKSyndrome(bth.NAKInvalidRequest).String() + ")"
			if got := describe(out); got != want {
				t.Fatalf("%v at +%d: responder sent %q, want %q", op, off, got, want)
			}
			if p.b.QP.State() != transport.StateErr {
				t.Fatalf("%v at +%d: responder in %v, want ERR", op, off, p.b.QP.State())
			}
			if !bytes.Equal(mr.Buf, guard) || !p.mem.GuardsIntact() {
				t.Fatalf("%v at +%d: the refused atomic changed memory", op, off)
			}
		}
	}
}

// TestLocalSinkDeregistered: the local MR a READ or an atomic returns its
// data into is deregistered after the request left and before its
// response arrives. The response must not land: the WR completes with
// LOC_PROT_ERR and the old buffer keeps its bytes.
func TestLocalSinkDeregistered(t *testing.T) {
	for _, op := range []transport.WROpcode{transport.WRRDMARead, transport.WRAtomicFetchAndAdd} {
		p := newPair(t, pairOpt{typ: transport.RC, mtu: bth.MTU256})
		loc := p.mem.Register(1, 1024, allAccess)
		rem := p.mem.Register(2, 1024, allAccess)
		fill(rem.Buf, 5)
		fill(loc.Buf, 6)
		guard := append([]byte(nil), loc.Buf...)
		n := 1024
		if op == transport.WRAtomicFetchAndAdd {
			n = 8
		}
		if err := p.a.QP.PostSend(0, &transport.SendWR{ID: 1, Opcode: op, Flags: transport.SendSignaled, CompareAdd: 1,
			SGL: []transport.SGE{loc.SGE(0, n)}, RemoteAddr: rem.Addr, RKey: rem.RKey}); err != nil {
			t.Fatal(err)
		}
		deliver(p.b.QP, 0, xmit(p.a.QP, 0)...)
		resp := xmit(p.b.QP, 0)
		if len(resp) == 0 {
			t.Fatalf("%v: no response", op)
		}
		p.mem.Deregister(loc)
		deliver(p.a.QP, 0, resp...)
		wcs := p.a.SendCQ.Take(nil)
		if len(wcs) != 1 || wcs[0].Status != transport.StatusLocProtErr {
			t.Fatalf("%v: completions %+v, want one LOC_PROT_ERR", op, wcs)
		}
		if !bytes.Equal(loc.Buf, guard) {
			t.Fatalf("%v: the response landed in the deregistered buffer", op)
		}
	}
}
