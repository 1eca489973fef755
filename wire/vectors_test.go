package wire_test

import (
	"bytes"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/wire"
)

// real_hw_vectors.pcap: four Ethernet frames rebuilt from published hex
// dumps (see ../shared/vectors/README.md).
func TestRealHardwareVectors(t *testing.T) {
	frames, err := readCapture(sharedVector(t, "real_hw_vectors.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		kind   wire.Kind
		opcode bth.Opcode
		icrc   [4]byte // wire bytes
		pad    int
	}{
		{wire.KindRoCEv2IPv4, bth.OpCNP, [4]byte{0x82, 0xfd, 0x00, 0x2a}, 0},
		{wire.KindRoCEv2IPv4, bth.OpRCRDMAReadRequest, [4]byte{0x08, 0xc6, 0x15, 0x4a}, 0},
		{wire.KindRoCEv1, bth.OpRCRDMAWriteOnly, [4]byte{0xe3, 0xd8, 0x56, 0xbb}, 3},
		{wire.KindRoCEv1, bth.OpRCAcknowledge, [4]byte{0x25, 0xf0, 0xc0, 0x38}, 0},
	}
	if len(frames) != len(want) {
		t.Fatalf("%d frames, want %d", len(frames), len(want))
	}
	var p wire.Packet
	for i, f := range frames {
		if err := p.Decode(f.data, wire.FramingEthernet); err != nil {
			t.Errorf("frame %d: %v", f.n, wire.Explain(f.data, wire.FramingEthernet))
			continue
		}
		w := want[i]
		if p.Kind != w.kind || p.Opcode != w.opcode || p.PadCnt != w.pad ||
			!bytes.Equal(f.data[p.ICRCOff:p.ICRCOff+4], w.icrc[:]) {
			t.Errorf("frame %d: kind %v opcode %v pad %d icrc % x", f.n, p.Kind, p.Opcode, p.PadCnt, f.data[p.ICRCOff:p.ICRCOff+4])
		}
		if got := rebuild(t, &p, wire.FramingEthernet); !bytes.Equal(got, f.data[:p.End]) {
			t.Errorf("frame %d: rebuild differs\n got %x\nwant %x", f.n, got, f.data[:p.End])
		}
	}
}

// The Wireshark ERF sample: 43 native IB frames from a real fabric, 37 with
// LNH=2 and 6 with LNH=3; ICRC and VCRC verify and Finish rebuilds each
// byte for byte.
func TestERFNativeIB(t *testing.T) {
	frames, err := readCapture(sharedVector(t, "wireshark_sample_infiniband_erf.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	var p wire.Packet
	counts := map[wire.Kind]int{}
	for _, f := range frames {
		if f.linkType != linkERF {
			t.Fatalf("frame %d: link type %d", f.n, f.linkType)
		}
		ib := erfInfiniBand(f.data)
		if ib == nil {
			t.Fatalf("frame %d: not an ERF InfiniBand record", f.n)
		}
		if err := p.Decode(ib, wire.FramingIB); err != nil {
			t.Errorf("frame %d: %v", f.n, wire.Explain(ib, wire.FramingIB))
			continue
		}
		counts[p.Kind]++
		if p.End != len(ib) {
			t.Errorf("frame %d: End %d, record %d bytes", f.n, p.End, len(ib))
		}
		if got := rebuild(t, &p, wire.FramingIB); !bytes.Equal(got, ib[:p.End]) {
			t.Errorf("frame %d: rebuild differs\n got %x\nwant %x", f.n, got, ib[:p.End])
		}
	}
	if counts[wire.KindIB] != 37 || counts[wire.KindIBGRH] != 6 {
		t.Errorf("kinds %v, want 37 ib and 6 ib-grh", counts)
	}
}
