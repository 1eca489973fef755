package transport_test

import (
	"bytes"
	"errors"
	"syscall"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/transport"
)

// A responder resolves the remote range of an RDMA WRITE or READ for every
// packet, as rxe does, so an MR deregistered in the middle of a message is
// refused from the next packet on. It used to keep the buffer the RETH
// resolved to for the rest of the message.

// wantAccessNAK checks that responder q answered with one NAK (remote
// access error) at PSN 1 and entered ERR.
func wantAccessNAK(t *testing.T, q *transport.QP, pkts [][]byte) {
	t.Helper()
	if got := describe(pkts); got != "RC_ACKNOWLEDGE@0x000001(NAK(REMOTE_ACCESS_ERR))" {
		t.Fatalf("responder sent %s, want one NAK, remote access error", got)
	}
	if st := q.State(); st != transport.StateErr {
		t.Fatalf("responder state %v, want ERR", st)
	}
}

// TestDeregMidWrite: B's target MR goes away after the first of four
// WRITE packets. RC: the second packet is NAKed (remote access error), B
// enters ERR, A completes the WRITE with REM_ACCESS_ERR, and nothing after
// the first packet lands. UC: the rest of the message is dropped.
func TestDeregMidWrite(t *testing.T) {
	for _, typ := range []transport.QPType{transport.RC, transport.UC} {
		t.Run(typ.String(), func(t *testing.T) {
			p := newPair(t, pairOpt{typ: typ, mtu: bth.MTU256})
			src := p.mem.Register(1, 1024, allAccess)
			dst := p.mem.Register(2, 1024, allAccess)
			fill(src.Buf, 3)
			if err := p.a.QP.PostSend(0, &transport.SendWR{ID: 1, Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
				SGL: []transport.SGE{src.SGE(0, 1024)}, RemoteAddr: dst.Addr, RKey: dst.RKey}); err != nil {
				t.Fatal(err)
			}
			pkts := xmit(p.a.QP, 0)
			if len(pkts) != 4 {
				t.Fatalf("WRITE of 1024 bytes at MTU 256 sent as %s", describe(pkts))
			}
			deliver(p.b.QP, 0, pkts[0])
			p.mem.Deregister(dst)
			deliver(p.b.QP, 0, pkts[1:]...)
			if !bytes.Equal(dst.Buf[:256], src.Buf[:256]) {
				t.Fatal("the first packet, before the deregistration, did not land")
			}
			if bytes.Contains(dst.Buf[256:], src.Buf[256:512]) || bytes.Contains(dst.Buf[256:], src.Buf[768:]) {
				t.Fatal("a packet received after the MR was deregistered landed in its buffer")
			}
			if typ == transport.UC {
				if st := p.b.QP.State(); st != transport.StateRTS {
					t.Fatalf("UC responder state %v, want RTS", st)
				}
				return
			}
			resp := xmit(p.b.QP, 0)
			wantAccessNAK(t, p.b.QP, resp)
			deliver(p.a.QP, 0, resp...)
			wantStatuses(t, "A", p.a.SendCQ.Take(nil), transport.StatusRemAccessErr)
		})
	}
}

// TestDeregMidReadResponse: B has sent the first of four READ response
// packets when the MR being read goes away. Its next packet is a NAK,
// remote access error, instead of the MR's bytes; B enters ERR and A
// completes the READ with REM_ACCESS_ERR.
func TestDeregMidReadResponse(t *testing.T) {
	p := newPair(t, pairOpt{typ: transport.RC, mtu: bth.MTU256})
	loc := p.mem.Register(1, 1024, allAccess)
	rem := p.mem.Register(2, 1024, allAccess)
	fill(rem.Buf, 4)
	if err := p.a.QP.PostSend(0, &transport.SendWR{ID: 1, Opcode: transport.WRRDMARead, Flags: transport.SendSignaled,
		SGL: []transport.SGE{loc.SGE(0, 1024)}, RemoteAddr: rem.Addr, RKey: rem.RKey}); err != nil {
		t.Fatal(err)
	}
	deliver(p.b.QP, 0, xmit(p.a.QP, 0)...)
	buf := make([]byte, 4096+128)
	n, _, ok := p.b.QP.Transmit(0, buf)
	if !ok {
		t.Fatal("no READ response")
	}
	first := bytes.Clone(buf[:n])
	p.mem.Deregister(rem)
	for i := range rem.Buf {
		rem.Buf[i] = 0xEE // the owner's again: the peer must not see it
	}
	rest := xmit(p.b.QP, 0)
	wantAccessNAK(t, p.b.QP, rest)
	deliver(p.a.QP, 0, first)
	deliver(p.a.QP, 0, rest...)
	wantStatuses(t, "A", p.a.SendCQ.Take(nil), transport.StatusRemAccessErr)
}

// TestWriteOver2GiB: a WRITE whose RETH DMA length exceeds 2^31 is refused
// on UC as on RC (rxe_resp.c check_length), whatever the MR's size.
func TestWriteOver2GiB(t *testing.T) {
	const length = transport.MaxMessageSize + 1024
	for _, typ := range []transport.QPType{transport.RC, transport.UC} {
		t.Run(typ.String(), func(t *testing.T) {
			// A real range of more than 2^31 bytes, so that only the
			// length check can refuse the WRITE: reserved, not committed;
			// only its first page is ever touched.
			span, err := syscall.Mmap(-1, 0, length, syscall.PROT_READ|syscall.PROT_WRITE,
				syscall.MAP_ANON|syscall.MAP_PRIVATE|syscall.MAP_NORESERVE)
			if err != nil {
				t.Skipf("cannot reserve %d bytes of address space: %v", length, err)
			}
			defer syscall.Munmap(span)
			mr := &wideMem{base: 0x1000, buf: span}
			B, _ := bigMemQP(t, typ, bth.MTU1024, mr)
			op := bth.OpRCRDMAWriteFirst
			if typ == transport.UC {
				op = bth.OpUCRDMAWriteFirst
			}
			oi := op.Info()
			pkt := make([]byte, oi.HdrLen+1024)
			bth.Header(pkt).Encode(&bth.Fields{Opcode: op, PKey: bth.DefaultPKey, DestQP: B.QPN(), PSN: 0})
			r := bth.RETH(pkt[oi.RETH:])
			r.SetVA(0x1000)
			r.SetRKey(0x122)
			r.SetDMALen(length)
			for i := oi.HdrLen; i < len(pkt); i++ {
				pkt[i] = 0xAB
			}
			deliver(B, 0, pkt)
			if span[0] == 0xAB {
				t.Fatalf("%v WRITE_FIRST with DMA length %d (over 2^31) placed its payload", typ, uint64(length))
			}
		})
	}
}

// wideMem grants every key over buf, which starts at VA base.
type wideMem struct {
	base uint64
	buf  []byte
}

func (m *wideMem) Local(pd uint32, lkey bth.LKey, addr uint64, length uint32, need transport.Access) ([]byte, error) {
	return m.Remote(pd, 0, addr, length, need)
}

func (m *wideMem) Remote(pd uint32, rkey bth.RKey, addr uint64, length uint32, need transport.Access) ([]byte, error) {
	if addr < m.base || addr-m.base+uint64(length) > uint64(len(m.buf)) {
		return nil, errors.New("wideMem: range outside the buffer")
	}
	off := addr - m.base
	return m.buf[off : off+uint64(length)], nil
}

func (m *wideMem) Invalidate(uint32, bth.RKey) error { return nil }
