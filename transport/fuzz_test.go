package transport_test

import (
	"encoding/binary"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/transport"
	tt "github.com/goroce/goroce/transport/transporttest"
)

// fuzzTarget is a live RC QP (B, in RTS, PSNs from 0) with receive WQEs,
// MRs with guard bytes on both sides, and its own outstanding requests (a
// SEND, a READ, an atomic) so that response packets reach the completer.
type fuzzTarget struct {
	mem  *tt.Memory
	b    *tt.Side
	info transport.RxInfo
	buf  []byte
}

func newFuzzTarget(t testing.TB) *fuzzTarget {
	mem := tt.NewMemory()
	b, err := tt.NewSide(transport.RC, 0x22, 2, mem, 16)
	if err != nil {
		t.Fatal(err)
	}
	peer, _ := tt.NewSide(transport.RC, 0x11, 1, mem, 16)
	if err := tt.Connect(0, peer.QP, b.QP, tt.Conn{MTU: bth.MTU256, Timeout: 1, RetryCnt: 7, RNRRetry: 7,
		MinRNRTimer: 1, MaxRdAtomic: 4, Access: allAccess}); err != nil {
		t.Fatal(err)
	}
	ft := &fuzzTarget{mem: mem, b: b, info: tt.GRHFor(0), buf: make([]byte, 4096)}
	// Registered memory of B, R_Keys idx<<8|0x22 for idx 1..3.
	w := mem.Register(2, 1024, allAccess)
	mem.Register(2, 64, transport.AccessRemoteRead)
	local := mem.Register(2, 1024, allAccess)
	for i := 0; i < 4; i++ {
		b.RQ.Post(uint64(i), local.SGE(0, 300), w.SGE(512, 100))
	}
	b.QP.PostSend(0, &transport.SendWR{ID: 1, Opcode: transport.WRSend, SGL: []transport.SGE{local.SGE(0, 600)}})
	b.QP.PostSend(0, &transport.SendWR{ID: 2, Opcode: transport.WRRDMARead, SGL: []transport.SGE{local.SGE(0, 600)},
		RemoteAddr: 0x1000, RKey: 0x122})
	b.QP.PostSend(0, &transport.SendWR{ID: 3, Opcode: transport.WRAtomicFetchAndAdd, SGL: []transport.SGE{local.SGE(8, 8)},
		RemoteAddr: 0x1000, RKey: 0x122, CompareAdd: 1})
	return ft
}

// records splits fuzz input into packets: [len u16][bytes]...
func records(data []byte, f func([]byte)) {
	for len(data) >= 2 {
		n := int(binary.BigEndian.Uint16(data))
		data = data[2:]
		n = min(n, len(data))
		f(data[:n])
		data = data[n:]
	}
}

func encodeRecords(pkts [][]byte) []byte {
	var out []byte
	for _, p := range pkts {
		out = binary.BigEndian.AppendUint16(out, uint16(len(p)))
		out = append(out, p...)
	}
	return out
}

// seedPackets are valid request and response packets for the fuzz target,
// made by a real requester and responder: SEND, WRITE (multi-packet, with
// immediate), READ, atomics, ACK, NAK, READ responses, atomic ACKs.
func seedPackets(t testing.TB) [][]byte {
	mem := tt.NewMemory()
	a, _ := tt.NewSide(transport.RC, 0x11, 1, mem, 16)
	b, _ := tt.NewSide(transport.RC, 0x22, 2, mem, 16)
	tt.Connect(0, a.QP, b.QP, tt.Conn{MTU: bth.MTU256, Timeout: 1, RetryCnt: 3, RNRRetry: 3, MinRNRTimer: 1,
		MaxRdAtomic: 4, Access: allAccess})
	bw := mem.Register(2, 1024, allAccess) // R_Key 0x122 in b's PD, as in the target
	aw := mem.Register(1, 1024, allAccess)
	mem.Register(2, 64, allAccess) // R_Key 0x322, invalidated by the SEND_WITH_INV
	for i := 0; i < 8; i++ {
		b.RQ.Post(uint64(i), bw.SGE(0, 1024))
		a.RQ.Post(uint64(i), aw.SGE(0, 1024))
	}
	wrs := []transport.SendWR{
		{Opcode: transport.WRSend, SGL: []transport.SGE{aw.SGE(0, 600)}},
		{Opcode: transport.WRRDMAWriteWithImm, SGL: []transport.SGE{aw.SGE(0, 700)}, RemoteAddr: bw.Addr, RKey: bw.RKey, Imm: 9},
		{Opcode: transport.WRRDMARead, SGL: []transport.SGE{aw.SGE(0, 600)}, RemoteAddr: bw.Addr, RKey: bw.RKey},
		{Opcode: transport.WRAtomicCmpAndSwp, SGL: []transport.SGE{aw.SGE(0, 8)}, RemoteAddr: bw.Addr, RKey: bw.RKey, CompareAdd: 0, Swap: 3},
		{Opcode: transport.WRSendWithInv, SGL: []transport.SGE{aw.SGE(0, 10)}, InvRKey: 0x322},
	}
	for i := range wrs {
		a.QP.PostSend(0, &wrs[i])
	}
	b.QP.PostSend(0, &transport.SendWR{Opcode: transport.WRSend, SGL: []transport.SGE{bw.SGE(0, 300)}})
	var pkts [][]byte
	w := tt.NewWire(a.QP, b.QP, 1, tt.Faults{})
	w.Tap = func(from int, p []byte, _ uint32) { pkts = append(pkts, append([]byte(nil), p...)) }
	w.Run(func() bool { return false }, 1e9)
	return pkts
}

// FuzzResponder feeds arbitrary packet sequences to a live RC QP: it must
// never panic, and no write may land outside a registered MR (the guard
// bytes around every MR stay intact).
func FuzzResponder(f *testing.F) {
	seeds := seedPackets(f)
	f.Add(encodeRecords(seeds))
	for _, p := range seeds {
		f.Add(encodeRecords([][]byte{p}))
	}
	f.Add([]byte{})
	f.Add(encodeRecords([][]byte{{0x0a, 0, 0xff, 0xff, 0, 0, 0, 0x22, 0x80, 0, 0, 0}}))
	f.Fuzz(func(t *testing.T, data []byte) {
		ft := newFuzzTarget(t)
		now := transport.Time(0)
		records(data, func(p []byte) {
			ft.b.QP.Receive(now, p, &ft.info)
			for k := 0; k < 64; k++ {
				if _, _, ok := ft.b.QP.Transmit(now, ft.buf); !ok {
					break
				}
			}
			now += 1e6
			if d := ft.b.QP.Deadline(); d <= now {
				ft.b.QP.Tick(now)
			}
		})
		if !ft.mem.GuardsIntact() {
			t.Fatal("write outside a registered MR")
		}
	})
}
