package bth_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
)

// Hand-computed header layouts (wire-spec §3): offsets from the BTH start.
func TestOpcodeTable(t *testing.T) {
	type row struct {
		op                                                          bth.Opcode
		name                                                        string
		hdrLen                                                      int
		rdeth, deth, feth, reth, atomic, aeth, atomicAck, imm, ieth int
	}
	rows := []row{
		{op: 0x00, name: "RC_SEND_FIRST", hdrLen: 12},
		{op: 0x01, name: "RC_SEND_MIDDLE", hdrLen: 12},
		{op: 0x03, name: "RC_SEND_LAST_WITH_IMMEDIATE", hdrLen: 16, imm: 12},
		{op: 0x04, name: "RC_SEND_ONLY", hdrLen: 12},
		{op: 0x06, name: "RC_RDMA_WRITE_FIRST", hdrLen: 28, reth: 12},
		{op: 0x07, name: "RC_RDMA_WRITE_MIDDLE", hdrLen: 12},
		{op: 0x09, name: "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE", hdrLen: 16, imm: 12},
		{op: 0x0A, name: "RC_RDMA_WRITE_ONLY", hdrLen: 28, reth: 12},
		{op: 0x0B, name: "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", hdrLen: 32, reth: 12, imm: 28},
		{op: 0x0C, name: "RC_RDMA_READ_REQUEST", hdrLen: 28, reth: 12},
		{op: 0x0D, name: "RC_RDMA_READ_RESPONSE_FIRST", hdrLen: 16, aeth: 12},
		{op: 0x0E, name: "RC_RDMA_READ_RESPONSE_MIDDLE", hdrLen: 12},
		{op: 0x0F, name: "RC_RDMA_READ_RESPONSE_LAST", hdrLen: 16, aeth: 12},
		{op: 0x10, name: "RC_RDMA_READ_RESPONSE_ONLY", hdrLen: 16, aeth: 12},
		{op: 0x11, name: "RC_ACKNOWLEDGE", hdrLen: 16, aeth: 12},
		{op: 0x12, name: "RC_ATOMIC_ACKNOWLEDGE", hdrLen: 24, aeth: 12, atomicAck: 16},
		{op: 0x13, name: "RC_COMPARE_SWAP", hdrLen: 40, atomic: 12},
		{op: 0x14, name: "RC_FETCH_ADD", hdrLen: 40, atomic: 12},
		{op: 0x16, name: "RC_SEND_LAST_WITH_INVALIDATE", hdrLen: 16, ieth: 12},
		{op: 0x17, name: "RC_SEND_ONLY_WITH_INVALIDATE", hdrLen: 16, ieth: 12},
		{op: 0x1C, name: "RC_FLUSH", hdrLen: 32, feth: 12, reth: 16},
		{op: 0x1D, name: "RC_ATOMIC_WRITE", hdrLen: 28, reth: 12},
		{op: 0x20, name: "UC_SEND_FIRST", hdrLen: 12},
		{op: 0x25, name: "UC_SEND_ONLY_WITH_IMMEDIATE", hdrLen: 16, imm: 12},
		{op: 0x2A, name: "UC_RDMA_WRITE_ONLY", hdrLen: 28, reth: 12},
		{op: 0x2B, name: "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", hdrLen: 32, reth: 12, imm: 28},
		{op: 0x40, name: "RD_SEND_FIRST", hdrLen: 24, rdeth: 12, deth: 16},
		{op: 0x4A, name: "RD_RDMA_WRITE_ONLY", hdrLen: 40, rdeth: 12, deth: 16, reth: 24},
		{op: 0x4C, name: "RD_RDMA_READ_REQUEST", hdrLen: 40, rdeth: 12, deth: 16, reth: 24},
		{op: 0x51, name: "RD_ACKNOWLEDGE", hdrLen: 20, rdeth: 12, aeth: 16},
		{op: 0x52, name: "RD_ATOMIC_ACKNOWLEDGE", hdrLen: 28, rdeth: 12, aeth: 16, atomicAck: 20},
		{op: 0x53, name: "RD_COMPARE_SWAP", hdrLen: 52, rdeth: 12, deth: 16, atomic: 24},
		{op: 0x64, name: "UD_SEND_ONLY", hdrLen: 20, deth: 12},
		{op: 0x65, name: "UD_SEND_ONLY_WITH_IMMEDIATE", hdrLen: 24, deth: 12, imm: 20},
		{op: 0x81, name: "CNP", hdrLen: 28},
	}
	for _, r := range rows {
		i := r.op.Info()
		got := row{r.op, i.Name, i.HdrLen, i.RDETH, i.DETH, i.FETH, i.RETH, i.AtomicETH, i.AETH, i.AtomicAckETH, i.ImmDt, i.IETH}
		if got != r || !r.op.Valid() || r.op.String() != r.name {
			t.Errorf("%#02x:\n got %+v\nwant %+v", uint8(r.op), got, r)
		}
	}
	for _, op := range []bth.Opcode{0x15, 0x18, 0x1B, 0x1E, 0x2C, 0x36, 0x60, 0x63, 0x66, 0x80, 0xA0, 0xC0, 0xFF} {
		if op.Valid() || op.Info().Valid() || op.String() != "Opcode(0x"+hex2(uint8(op))+")" {
			t.Errorf("%#02x should be unknown (%q)", uint8(op), op.String())
		}
	}
	// Every valid row: HdrLen is the BTH plus the sum of its ETHs.
	size := map[bth.Flags]int{bth.FlagRDETH: 4, bth.FlagDETH: 8, bth.FlagRETH: 16, bth.FlagAtomicETH: 28,
		bth.FlagAETH: 4, bth.FlagAtomicAckETH: 8, bth.FlagImmDt: 4, bth.FlagIETH: 4, bth.FlagFETH: 4, bth.FlagCNPReserved: 16}
	n := 0
	for _, op := range bth.Opcodes() {
		i := op.Info()
		want := bth.HeaderLen
		for f, s := range size {
			if i.Has(f) {
				want += s
			}
		}
		if i.HdrLen != want {
			t.Errorf("%v: HdrLen %d, ETH sum %d", op, i.HdrLen, want)
		}
		if i.Has(bth.FlagReq) == i.Has(bth.FlagResp) && op != bth.OpCNP {
			t.Errorf("%v: must be exactly one of request/response", op)
		}
		n++
	}
	if n != 25+12+21+2+1 { // RC 25, UC 12, RD 21, UD 2, CNP 1
		t.Errorf("%d known opcodes", n)
	}
	if bth.OpUCSendOnly.Transport() != bth.TransportUC || bth.OpCNP.Transport() != bth.TransportCNP {
		t.Error("Transport()")
	}
}

func hex2(b uint8) string {
	const d = "0123456789abcdef"
	return string([]byte{d[b>>4], d[b&15]})
}

func TestFixedHdrLen(t *testing.T) {
	for _, tc := range []struct {
		op   bth.Opcode
		want int
	}{
		{bth.OpRCAcknowledge, 16},       // BTH, AETH
		{bth.OpRCAtomicAcknowledge, 24}, // BTH, AETH, AtomicAckETH
		{bth.OpRCRDMAReadRequest, 28},   // BTH, RETH
		{bth.OpCNP, 28},                 // BTH, 16 reserved bytes
		{bth.OpRCSendOnly, 0},
		{bth.OpRCRDMAReadResponseMiddle, 0},
		{bth.OpUDSendOnly, 0},
		{bth.Opcode(0xFF), 0},
	} {
		if got := tc.op.FixedHdrLen(); got != tc.want {
			t.Errorf("%v: FixedHdrLen %d, want %d", tc.op, got, tc.want)
		}
	}
}

func TestPSN(t *testing.T) {
	tests := []struct {
		p, q bth.PSN
		add  uint32
		sum  bth.PSN
		sub  int32
		cmp  int
	}{
		{0, 0, 1, 1, 0, 0},
		{0xFFFFFF, 0, 1, 0, -1, -1},
		{0, 0xFFFFFF, 0xFFFFFF, 0xFFFFFF, 1, 1},
		{0xFFFFFE, 0x000001, 3, 0x000001, -3, -1},
		{0x7FFFFF, 0, 0x800001, 0, 0x7FFFFF, 1},
		{0x800000, 0, 0, 0x800000, -0x800000, -1},
		{0x54CB63, 0x54CB63, 64, 0x54CBA3, 0, 0},
		{0x000005, 0xFFFFFB, 0x1000000, 0x000005, 10, 1},
	}
	for _, tc := range tests {
		if got := tc.p.Add(tc.add); got != tc.sum {
			t.Errorf("%v.Add(%#x) = %v, want %v", tc.p, tc.add, got, tc.sum)
		}
		if got := tc.p.Sub(tc.q); got != tc.sub {
			t.Errorf("%v.Sub(%v) = %d, want %d", tc.p, tc.q, got, tc.sub)
		}
		if got := tc.p.Compare(tc.q); got != tc.cmp {
			t.Errorf("%v.Compare(%v) = %d, want %d", tc.p, tc.q, got, tc.cmp)
		}
		if tc.p.Less(tc.q) != (tc.cmp < 0) {
			t.Errorf("%v.Less(%v)", tc.p, tc.q)
		}
	}
	if bth.PSN(0x1000000).Valid() || !bth.PSN(0xFFFFFF).Valid() || bth.PSN(0xABC).String() != "0x000abc" {
		t.Error("PSN Valid/String")
	}
}

func TestSyndrome(t *testing.T) {
	tests := []struct {
		s     bth.Syndrome
		want  uint8
		typ   bth.AckType
		value uint8
		str   string
	}{
		{bth.SyndromeACKUnlimited, 0x1F, bth.AckTypeACK, 31, "ACK(credits=31)"},
		{bth.ACKSyndrome(5), 0x05, bth.AckTypeACK, 5, "ACK(credits=5)"},
		{bth.ACKSyndrome(0xFF), 0x1F, bth.AckTypeACK, 31, "ACK(credits=31)"},
		{bth.RNRNAKSyndrome(12), 0x2C, bth.AckTypeRNRNAK, 12, "RNR_NAK(timer=12)"},
		{bth.RNRNAKSyndrome(0), 0x20, bth.AckTypeRNRNAK, 0, "RNR_NAK(timer=0)"},
		{bth.NAKSyndrome(bth.NAKPSNSequenceError), 0x60, bth.AckTypeNAK, 0, "NAK(PSN_SEQ_ERR)"},
		{bth.NAKSyndrome(bth.NAKInvalidRequest), 0x61, bth.AckTypeNAK, 1, "NAK(INVALID_REQUEST)"},
		{bth.NAKSyndrome(bth.NAKRemoteAccessError), 0x62, bth.AckTypeNAK, 2, "NAK(REMOTE_ACCESS_ERR)"},
		{bth.NAKSyndrome(bth.NAKRemoteOperational), 0x63, bth.AckTypeNAK, 3, "NAK(REMOTE_OP_ERR)"},
		{bth.NAKSyndrome(bth.NAKInvalidRDRequest), 0x64, bth.AckTypeNAK, 4, "NAK(INVALID_RD_REQUEST)"},
		{bth.Syndrome(0x45), 0x45, bth.AckTypeReserved, 5, "Syndrome(0x45)"},
	}
	for _, tc := range tests {
		if uint8(tc.s) != tc.want || tc.s.Type() != tc.typ || tc.s.Value() != tc.value || tc.s.String() != tc.str || tc.s.Reserved() {
			t.Errorf("%#02x: type %v value %d %q", uint8(tc.s), tc.s.Type(), tc.s.Value(), tc.s.String())
		}
	}
	if bth.RNRNAKSyndrome(12).RNRTimer() != 12 || bth.NAKSyndrome(bth.NAKRemoteAccessError).NAKCode() != bth.NAKRemoteAccessError {
		t.Error("RNRTimer/NAKCode")
	}
	if !bth.Syndrome(0x80).Reserved() || !bth.ACKSyndrome(3).IsACK() || bth.NAKSyndrome(0).IsACK() {
		t.Error("Reserved/IsACK")
	}
	if n, ok := bth.SyndromeACKUnlimited.Credits(); ok || n != 0 {
		t.Error("0x1F credits must be untracked")
	}
	for code, want := range map[uint8]int{0: 0, 5: 6, 10: 32, 20: 1024, 30: 32768} {
		if n, ok := bth.ACKSyndrome(code).Credits(); !ok || n != want {
			t.Errorf("credit code %d = %d", code, n)
		}
	}
	if bth.CreditCode(7) != 5 || bth.CreditCode(32768) != 30 || bth.CreditCode(0) != 0 {
		t.Error("CreditCode")
	}
}

func TestTimers(t *testing.T) {
	rnr := map[bth.RNRTimer]time.Duration{
		0: 655360 * time.Microsecond, 1: 10 * time.Microsecond, 12: 640 * time.Microsecond,
		14: 1280 * time.Microsecond, 25: 61440 * time.Microsecond, 31: 491520 * time.Microsecond,
	}
	for c, want := range rnr {
		if got := c.Duration(); got != want {
			t.Errorf("RNR %d = %v, want %v", c, got, want)
		}
	}
	ack := map[uint8]time.Duration{0: 0, 1: 8192, 14: 67108864, 17: 536870912, 20: 4294967296, 31: 4096 << 31}
	for c, want := range ack {
		if got := bth.LocalACKTimeout(c); got != want {
			t.Errorf("LocalACKTimeout(%d) = %v, want %v", c, got, want)
		}
	}
	if d := bth.LocalACKTimeout(14); d.Round(100*time.Microsecond) != 67100*time.Microsecond {
		t.Errorf("LocalACKTimeout(14) = %v, want 67.1ms", d)
	}
}

func TestMTU(t *testing.T) {
	if bth.MTU1024.Bytes() != 1024 || bth.MTU4096.Bytes() != 4096 || bth.MTU(0).Bytes() != 0 || bth.MTU(6).Valid() {
		t.Error("Bytes/Valid")
	}
	if bth.LargestMTU(1500-80) != bth.MTU1024 || bth.LargestMTU(9000-80) != bth.MTU4096 || bth.LargestMTU(255) != 0 {
		t.Error("LargestMTU (rxe: netdev MTU - 80)")
	}
	if bth.MTUFromBytes(2048) != bth.MTU2048 || bth.MTUFromBytes(1000) != 0 {
		t.Error("MTUFromBytes")
	}
}

// Setters change only their field: start from all-ones and all-zeros
// buffers, set each field, and compare every other field.
func TestHeaderSettersPreserveNeighbours(t *testing.T) {
	for _, fill := range []byte{0x00, 0xFF} {
		b := bytes.Repeat([]byte{fill}, bth.HeaderLen)
		h := bth.Header(b)
		orig := h.Fields()
		origResv6, origResv7 := h.Resv6(), h.Resv7()
		check := func(what string, mod func(f *bth.Fields)) {
			t.Helper()
			want := orig
			mod(&want)
			if got := h.Fields(); got != want || h.Resv6() != origResv6 || h.Resv7() != origResv7 {
				t.Errorf("fill %#x, %s: got %+v want %+v (bytes %x)", fill, what, got, want, b)
			}
			orig = h.Fields()
		}
		h.SetPSN(0x1234567) // 24-bit masking
		check("SetPSN", func(f *bth.Fields) { f.PSN = 0x234567 })
		h.SetDestQP(0xFF000001)
		check("SetDestQP", func(f *bth.Fields) { f.DestQP = 1 })
		h.SetPadCnt(6)
		check("SetPadCnt", func(f *bth.Fields) { f.PadCnt = 2 })
		h.SetTVer(0x1F)
		check("SetTVer", func(f *bth.Fields) { f.TVer = 0xF })
		h.SetSE(fill == 0)
		check("SetSE", func(f *bth.Fields) { f.SE = fill == 0 })
		h.SetMigReq(fill == 0)
		check("SetMigReq", func(f *bth.Fields) { f.MigReq = fill == 0 })
		h.SetAckReq(fill == 0)
		check("SetAckReq", func(f *bth.Fields) { f.AckReq = fill == 0 })
		h.SetFECN(fill == 0)
		check("SetFECN", func(f *bth.Fields) { f.FECN = fill == 0 })
		h.SetBECN(fill == 0)
		check("SetBECN", func(f *bth.Fields) { f.BECN = fill == 0 })
		h.SetPKey(0x7FFF)
		check("SetPKey", func(f *bth.Fields) { f.PKey = 0x7FFF })
		h.SetOpcode(bth.OpRCAcknowledge)
		check("SetOpcode", func(f *bth.Fields) { f.Opcode = bth.OpRCAcknowledge })
	}
}

func TestExtSetters(t *testing.T) {
	b := bytes.Repeat([]byte{0xFF}, 28)
	d := bth.DETH(b)
	d.SetSrcQP(0x1000002)
	if d.SrcQP() != 2 || b[4] != 0xFF || d.QKey() != 0xFFFFFFFF {
		t.Errorf("DETH %x", b[:8])
	}
	a := bth.AETH(b)
	a.SetMSN(0xABCDEF12)
	if a.MSN() != 0xCDEF12 || a.Syndrome() != 0xFF {
		t.Errorf("AETH %x", b[:4])
	}
	r := bth.RDETH(b)
	r.SetEEContext(0x1000003)
	if r.EEContext() != 3 || b[0] != 0xFF {
		t.Errorf("RDETH %x", b[:4])
	}
	f := bth.FETH(bytes.Repeat([]byte{0xFF}, 4))
	f.Set(0x1F, 0x7)
	if f.PlacementType() != 0xF || f.SelectivityLevel() != 3 || f[3]&0xC0 != 0xC0 {
		t.Errorf("FETH %x", f)
	}
	at := bth.AtomicETH(b)
	at.SetVA(1)
	at.SetRKey(2)
	at.SetSwapAdd(3)
	at.SetCompare(4)
	if at.VA() != 1 || at.RKey() != 2 || at.SwapAdd() != 3 || at.Compare() != 4 {
		t.Errorf("AtomicETH %x", b)
	}
	re := bth.RETH(b)
	re.SetVA(0x7fee260fb000)
	re.SetRKey(0x2b8)
	re.SetDMALen(65536)
	want := []byte{0, 0, 0x7f, 0xee, 0x26, 0x0f, 0xb0, 0, 0, 0, 2, 0xb8, 0, 1, 0, 0}
	if !bytes.Equal(b[:16], want) || re.VA() != 0x7fee260fb000 || re.RKey() != 0x2b8 || re.DMALen() != 65536 {
		t.Errorf("RETH %x", b[:16])
	}
}

// The BTH of wire-spec §5.4: RC READ REQUEST, QP 0x11, AckReq, PSN 0x54CB63.
func TestHeaderVector(t *testing.T) {
	b := []byte{0x0c, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x11, 0x80, 0x54, 0xcb, 0x63}
	want := bth.Fields{Opcode: bth.OpRCRDMAReadRequest, PKey: 0xFFFF, DestQP: 0x11, AckReq: true, PSN: 0x54CB63}
	if got := bth.Header(b).Fields(); got != want {
		t.Errorf("Fields = %+v", got)
	}
	out := make([]byte, 12)
	bth.Header(out).Encode(&want)
	if !bytes.Equal(out, b) {
		t.Errorf("Encode = %x", out)
	}
}

// FuzzBTH: decoding any 12 bytes and re-encoding the fields reproduces them
// except the reserved bits (resv6, resv7), which Encode writes as zero.
func FuzzBTH(f *testing.F) {
	f.Add([]byte{0x0c, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x11, 0x80, 0x54, 0xcb, 0x63})
	f.Add([]byte{0x81, 0x00, 0xff, 0xff, 0x40, 0x00, 0x01, 0x18, 0x00, 0x00, 0x00, 0x00})
	f.Add(bytes.Repeat([]byte{0xFF}, 12))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < bth.HeaderLen {
			return
		}
		h := bth.Header(b)
		fl := h.Fields()
		if !fl.PSN.Valid() || !fl.DestQP.Valid() || fl.PadCnt > 3 || fl.TVer > 15 {
			t.Fatalf("field out of range: %+v", fl)
		}
		out := make([]byte, bth.HeaderLen)
		bth.Header(out).Encode(&fl)
		want := append([]byte(nil), b[:bth.HeaderLen]...)
		want[4] &^= 0x3F
		want[8] &^= 0x7F
		if !bytes.Equal(out, want) {
			t.Fatalf("re-encoded %x, want %x", out, want)
		}
		if info := fl.Opcode.Info(); info.Valid() != fl.Opcode.Valid() || (info.Valid() && info.HdrLen < bth.HeaderLen) {
			t.Fatalf("opcode %v info %+v", fl.Opcode, info)
		}
	})
}
