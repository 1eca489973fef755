package pcap

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/wire"
)

// checkLayers decodes frame with gopacket from the link type's first layer
// and checks that the BTH layer agrees with wire's descriptor.
func checkLayers(t *testing.T, name string, f *Frame, first gopacket.Decoder, p *wire.Packet) {
	t.Helper()
	pkt := gopacket.NewPacket(f.Data, first, gopacket.Default)
	if el := pkt.ErrorLayer(); el != nil {
		t.Fatalf("%s frame %d: gopacket: %v", name, f.Index, el.Error())
	}
	l := pkt.Layer(LayerTypeBTH)
	if l == nil {
		t.Fatalf("%s frame %d: no BTH layer, layers %v", name, f.Index, pkt.Layers())
	}
	b := l.(*BTH)
	if b.Opcode != p.Opcode || b.PSN != p.PSN || b.DestQP != p.DestQP {
		t.Fatalf("%s frame %d: layer %v qp %v psn %v, wire %v qp %v psn %v",
			name, f.Index, b.Opcode, b.DestQP, b.PSN, p.Opcode, p.DestQP, p.PSN)
	}
	if !bytes.Equal(b.Payload, p.Payload()) {
		t.Fatalf("%s frame %d: payload %d bytes, wire %d", name, f.Index, len(b.Payload), len(p.Payload()))
	}
	if b.ICRC != p.ICRC() {
		t.Fatalf("%s frame %d: ICRC %08x, wire %08x", name, f.Index, b.ICRC, p.ICRC())
	}
	if p.Info.AETH != 0 && b.Syndrome != p.AETH().Syndrome() {
		t.Fatalf("%s frame %d: syndrome %v, wire %v", name, f.Index, b.Syndrome, p.AETH().Syndrome())
	}
	if p.Info.RETH != 0 && (b.VA != p.RETH().VA() || b.RKey != p.RETH().RKey() || b.DMALen != p.RETH().DMALen()) {
		t.Fatalf("%s frame %d: RETH differs", name, f.Index)
	}
	if p.Info.DETH != 0 && (b.QKey != p.DETH().QKey() || b.SrcQP != p.DETH().SrcQP()) {
		t.Fatalf("%s frame %d: DETH differs", name, f.Index)
	}
	switch p.Kind {
	case wire.KindRoCEv2IPv4:
		if pkt.Layer(layers.LayerTypeUDP) == nil || pkt.Layer(layers.LayerTypeIPv4) == nil {
			t.Fatalf("%s frame %d: layers %v", name, f.Index, pkt.Layers())
		}
	case wire.KindRoCEv2IPv6:
		if pkt.Layer(layers.LayerTypeUDP) == nil || pkt.Layer(layers.LayerTypeIPv6) == nil {
			t.Fatalf("%s frame %d: layers %v", name, f.Index, pkt.Layers())
		}
	case wire.KindRoCEv1:
		if pkt.Layer(LayerTypeGRH) == nil {
			t.Fatalf("%s frame %d: RoCEv1 without GRH layer: %v", name, f.Index, pkt.Layers())
		}
	case wire.KindIB, wire.KindIBGRH:
		lrh, ok := pkt.Layer(LayerTypeLRH).(*LRH)
		if !ok || !lrh.HasVCRC || lrh.VCRC != p.VCRC() {
			t.Fatalf("%s frame %d: LRH/VCRC layer wrong: %v", name, f.Index, pkt.Layers())
		}
		if (p.Kind == wire.KindIBGRH) != (pkt.Layer(LayerTypeGRH) != nil) {
			t.Fatalf("%s frame %d: GRH layer presence wrong for %v", name, f.Index, p.Kind)
		}
	}
}

// eachRoCEFrame calls fn for every frame of the capture that wire decodes
// as a good RoCE/IB packet, and returns how many there were.
func eachRoCEFrame(t *testing.T, file string, fn func(f *Frame, p *wire.Packet)) int {
	t.Helper()
	fh, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	r, err := NewReader(fh)
	if err != nil {
		t.Fatal(err)
	}
	var (
		f Frame
		p wire.Packet
		n int
	)
	for {
		err := r.Next(&f)
		if err == io.EOF {
			return n
		}
		if err != nil {
			t.Fatal(err)
		}
		framing, ok := FramingFor(f.Format)
		if !ok {
			continue
		}
		if err := p.Decode(f.Data, framing); err != nil {
			if err == wire.ErrNotRoCE {
				continue
			}
			t.Fatalf("%s frame %d: %v", file, f.Index, wire.Explain(f.Data, framing))
		}
		fn(&f, &p)
		n++
	}
}

func TestLayersRealCaptures(t *testing.T) {
	for _, file := range captureFiles(t) {
		t.Run(filepath.Base(file), func(t *testing.T) {
			n := eachRoCEFrame(t, file, func(f *Frame, p *wire.Packet) {
				checkLayers(t, file, f, layers.LayerTypeEthernet, p)
			})
			if n == 0 {
				t.Fatal("no RoCE frames")
			}
		})
	}
}

func TestLayersRealHardwareVectors(t *testing.T) {
	for _, tc := range []struct {
		file  string
		first gopacket.Decoder
		want  int
	}{
		{"real_hw_vectors.pcap", layers.LayerTypeEthernet, 4},
		// Native IB in ERF records, decoded from the link type.
		{"wireshark_sample_infiniband_erf.pcap", layers.LinkType(LinkTypeERF), 43},
	} {
		t.Run(tc.file, func(t *testing.T) {
			file := vectorFile(t, tc.file)
			n := eachRoCEFrame(t, file, func(f *Frame, p *wire.Packet) {
				if tc.first == layers.LinkType(LinkTypeERF) {
					// f.Data has the ERF header stripped; decode the raw
					// record to exercise the ERF layer too.
					checkLayers(t, file, f, LayerTypeLRH, p)
					return
				}
				checkLayers(t, file, f, tc.first, p)
			})
			if n != tc.want {
				t.Fatalf("%d RoCE/IB frames, want %d", n, tc.want)
			}
		})
	}
}

func TestLayerERFRecord(t *testing.T) {
	file := vectorFile(t, "wireshark_sample_infiniband_erf.pcap")
	data := readFile(t, file)
	// First record: pcap header 24 + record header 16, then the ERF record.
	rec := data[24+16 : 24+16+306]
	pkt := gopacket.NewPacket(rec, layers.LinkType(LinkTypeERF), gopacket.Default)
	if el := pkt.ErrorLayer(); el != nil {
		t.Fatal(el.Error())
	}
	e, ok := pkt.Layer(LayerTypeERF).(*ERF)
	if !ok {
		t.Fatalf("no ERF layer: %v", pkt.Layers())
	}
	if e.Type != ERFTypeInfiniBand || e.WLen != 290 || e.RLen != 312 || e.Flags != 0x05 {
		t.Fatalf("ERF header %+v", e)
	}
	if e.Timestamp.Year() != 2008 {
		t.Fatalf("timestamp %v, want a 2008 date", e.Timestamp)
	}
	lrh, ok := pkt.Layer(LayerTypeLRH).(*LRH)
	if !ok || lrh.VL != 15 || lrh.LNH != LNHIBALocal || int(lrh.PktLen)*4+2 != 290 {
		t.Fatalf("LRH %+v", lrh)
	}
	if pkt.Layer(LayerTypeBTH) == nil {
		t.Fatalf("no BTH: %v", pkt.Layers())
	}
}

// A RoCEv2 frame, byte by byte (wire-spec §5.4, rxe RDMA READ request).
var readRequestFrame = []byte{
	0x00, 0x0c, 0x29, 0xae, 0x1c, 0xa4, 0x00, 0x0c, 0x29, 0x89, 0xa2, 0xe5, 0x08, 0x00, // Ethernet
	0x45, 0x00, 0x00, 0x3c, 0xbe, 0x10, 0x40, 0x00, 0x40, 0x11, 0x8a, 0x4b, // IPv4
	0xc0, 0xa8, 0x38, 0x81, 0xc0, 0xa8, 0x38, 0x83,
	0xdf, 0x94, 0x12, 0xb7, 0x00, 0x28, 0x00, 0x00, // UDP sport 0xdf94 dport 4791
	0x0c, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x11, 0x80, 0x54, 0xcb, 0x63, // BTH
	0x00, 0x00, 0x7f, 0xee, 0x26, 0x0f, 0xb0, 0x00, 0x00, 0x00, 0x02, 0xb8, 0x00, 0x01, 0x00, 0x00, // RETH
	0x08, 0xc6, 0x15, 0x4a, // ICRC
}

func TestLayerBTHVector(t *testing.T) {
	pkt := gopacket.NewPacket(readRequestFrame, layers.LayerTypeEthernet, gopacket.Default)
	if el := pkt.ErrorLayer(); el != nil {
		t.Fatal(el.Error())
	}
	b, ok := pkt.Layer(LayerTypeBTH).(*BTH)
	if !ok {
		t.Fatalf("no BTH layer: %v", pkt.Layers())
	}
	want := BTH{Fields: bth.Fields{Opcode: bth.OpRCRDMAReadRequest, PKey: 0xFFFF, DestQP: 0x11, AckReq: true, PSN: 0x54CB63},
		VA: 0x7fee260fb000, RKey: 0x2b8, DMALen: 65536, ICRC: 0x4a15c608}
	if b.Fields != want.Fields || b.VA != want.VA || b.RKey != want.RKey || b.DMALen != want.DMALen || b.ICRC != want.ICRC {
		t.Fatalf("got %+v", b)
	}
	if len(b.Payload) != 0 || len(b.Contents) != 28 {
		t.Fatalf("contents %d payload %d", len(b.Contents), len(b.Payload))
	}
}

func TestLayerBTHMalformed(t *testing.T) {
	base := readRequestFrame[42:] // BTH..ICRC
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"short BTH", base[:11]},
		{"no RETH room", base[:20]},
		{"no ICRC room", base[:28+3]},
		{"unknown opcode", append([]byte{0x15}, base[1:]...)},
		{"payload on READ request", append(append([]byte{}, base[:28]...), 1, 2, 3, 4, 5, 6, 7, 8)},
		{"pad beyond payload", append([]byte{0x04, 0x30}, base[2:16]...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b BTH
			err := b.DecodeFromBytes(tc.b, gopacket.NilDecodeFeedback)
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("err = %v, want ErrMalformed", err)
			}
		})
	}
}

// Every prefix of every layer's input must give an error or a result, never
// a panic.
func TestLayersTruncation(t *testing.T) {
	for i := 0; i <= len(readRequestFrame); i++ {
		gopacket.NewPacket(readRequestFrame[:i], layers.LayerTypeEthernet, gopacket.Default)
		var (
			b BTH
			g GRH
			l LRH
			e ERF
		)
		d := readRequestFrame[:i]
		_ = b.DecodeFromBytes(d, gopacket.NilDecodeFeedback)
		_ = g.DecodeFromBytes(d, gopacket.NilDecodeFeedback)
		_ = l.DecodeFromBytes(d, gopacket.NilDecodeFeedback)
		_ = e.DecodeFromBytes(d, gopacket.NilDecodeFeedback)
	}
}

func FuzzLayers(f *testing.F) {
	f.Add(readRequestFrame, uint8(0))
	f.Add(readRequestFrame[14:], uint8(1))
	f.Add(readRequestFrame[42:], uint8(2))
	f.Add([]byte{0xf0, 0x02, 0xff, 0xff, 0x00, 0x07, 0xff, 0xff, 0x11, 0x40, 0xff, 0xff, 0x00, 0x87, 0x04, 0x08,
		0x00, 0xd4, 0x0a, 0x55, 0x1f, 0x00, 0x00, 0x01, 0xa8, 0x03, 0x55, 0x50, 0x30, 0x81}, uint8(3))
	f.Add(AppendERF(nil, GenEpoch, ERFTypeInfiniBand, []byte{0, 2, 0, 4, 0, 7, 0, 1}, 8), uint8(4))
	f.Fuzz(func(t *testing.T, data []byte, which uint8) {
		first := []gopacket.Decoder{layers.LayerTypeEthernet, layers.LayerTypeIPv4, LayerTypeBTH,
			LayerTypeLRH, LayerTypeERF, LayerTypeGRH}[int(which)%6]
		pkt := gopacket.NewPacket(data, first, gopacket.Default)
		if b, ok := pkt.Layer(LayerTypeBTH).(*BTH); ok {
			if !b.Info.Valid() || len(b.Contents) != b.Info.HdrLen || len(b.Pad) != b.PadCnt {
				t.Fatalf("inconsistent BTH layer %+v", b)
			}
		}
	})
}
