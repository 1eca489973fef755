package pcap

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/goroce/goroce/hca/link"
)

func TestERFRecordBytes(t *testing.T) {
	ts := time.Date(2026, 1, 15, 12, 0, 0, 500_000_000, time.UTC)
	frame := bytes.Repeat([]byte{0xAB}, 30)
	rec := AppendERF(nil, ts, ERFTypeInfiniBand, frame, 30)
	want := []byte{
		0, 0, 0, 0x80, 0xC0, 0xD6, 0x68, 0x69, // ts: 0x6968D6C0 s (2026-01-15T12:00Z) . 0x80000000 (0.5 s), little-endian
		0x15,       // type InfiniBand
		0x04,       // flags: varying length
		0x00, 0x30, // rlen = 16+30 rounded up to 8 = 48
		0x00, 0x00, // lctr
		0x00, 0x1E, // wlen 30
	}
	if !bytes.Equal(rec[:16], want) {
		t.Fatalf("ERF header\n got % x\nwant % x", rec[:16], want)
	}
	if !bytes.Equal(rec[16:], frame) || len(rec) != 46 {
		t.Fatalf("ERF body wrong (len %d)", len(rec))
	}
	h, err := parseERF(rec)
	if err != nil || !h.ts.Equal(ts) || h.typ != ERFTypeInfiniBand || h.payLen != 30 || h.hdrLen != 16 {
		t.Fatalf("parseERF = %+v, %v", h, err)
	}
}

// The ERF records we write must look like the ones in Wireshark's own IB
// sample: same flags, rlen rounding and pcap caplen.
func TestERFMatchesWiresharkSample(t *testing.T) {
	data := readFile(t, vectorFile(t, "wireshark_sample_infiniband_erf.pcap"))
	rec := data[24+16 : 24+16+306]
	var buf bytes.Buffer
	w, err := NewWriter(&buf, LinkTypeERF)
	if err != nil {
		t.Fatal(err)
	}
	h, err := parseERF(rec)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WriteFrame(h.ts, rec[16:]); err != nil {
		t.Fatal(err)
	}
	out := buf.Bytes()
	if binary.LittleEndian.Uint32(out[20:]) != 197 {
		t.Fatalf("link type %d", binary.LittleEndian.Uint32(out[20:]))
	}
	got := out[24+16:]
	// The sample's flags carry interface 1 (bit 0); ours use interface 0.
	wantHdr := append([]byte{}, rec[:16]...)
	wantHdr[9] &^= 0x03
	// Timestamps go through time.Time (nanoseconds): the binary fraction
	// survives to within one nanosecond (4.3 units of 2^-32 s).
	gotTS, wantTS := binary.LittleEndian.Uint64(got), binary.LittleEndian.Uint64(wantHdr)
	if d := int64(gotTS - wantTS); d < -5 || d > 5 {
		t.Fatalf("timestamp %x, want %x", gotTS, wantTS)
	}
	if !bytes.Equal(got[8:16], wantHdr[8:]) || !bytes.Equal(got[16:], rec[16:]) {
		t.Fatalf("record\n got % x\nwant % x", got[:16], wantHdr)
	}
	if caplen := binary.LittleEndian.Uint32(out[24+8:]); caplen != 306 {
		t.Fatalf("pcap caplen %d, want 306 like the sample", caplen)
	}
}

func writeCapture(t *testing.T, lt LinkType, frames ...[]byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := NewWriter(&buf, lt)
	if err != nil {
		t.Fatal(err)
	}
	for i, f := range frames {
		if err := w.WriteFrame(GenEpoch.Add(time.Duration(i)*time.Millisecond), f); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

func TestReaderLinkTypes(t *testing.T) {
	ip := readRequestFrame[14:]
	ib := []byte{0x00, 0x02, 0x00, 0x04, 0x00, 0x07, 0x00, 0x01, 0x11, 0x40, 0xff, 0xff, 0x00, 0x87, 0x04, 0x08,
		0x00, 0xd4, 0x0a, 0x55, 0x1f, 0x00, 0x00, 0x01, 0xa8, 0x03, 0x55, 0x50, 0x30, 0x81}
	sll := append([]byte{0, 0, 0, 1, 0, 6, 0, 0x0c, 0x29, 0x89, 0xa2, 0xe5, 0, 0, 0x08, 0x00}, ip...)
	sll2 := append([]byte{0x08, 0x00, 0, 0, 0, 0, 0, 2, 0, 1, 0, 6, 0, 0x0c, 0x29, 0x89, 0xa2, 0xe5, 0, 0}, ip...)
	for _, tc := range []struct {
		lt     LinkType
		frame  []byte
		format link.Format
		data   []byte
	}{
		{LinkTypeEthernet, readRequestFrame, link.FormatEthernet, readRequestFrame},
		{LinkTypeRaw, ip, link.FormatIP, ip},
		{LinkTypeIPv4, ip, link.FormatIP, ip},
		{LinkTypeInfiniBand, ib, link.FormatIB, ib},
		{LinkTypeERF, ib, link.FormatIB, ib},
		{LinkTypeLinuxSLL, sll, link.FormatIP, ip},
		{LinkTypeLinuxSLL2, sll2, link.FormatIP, ip},
	} {
		t.Run(tc.lt.String(), func(t *testing.T) {
			var file []byte
			if tc.lt == LinkTypeLinuxSLL || tc.lt == LinkTypeLinuxSLL2 {
				var buf bytes.Buffer
				pw := pcapgo.NewWriter(&buf)
				_ = pw.WriteFileHeader(Snaplen, layers.LinkType(tc.lt&0xFF))
				binary.LittleEndian.PutUint32(buf.Bytes()[20:], uint32(tc.lt)) // 276 does not fit pcapgo's uint8
				_ = pw.WritePacket(gopacket.CaptureInfo{Timestamp: GenEpoch, CaptureLength: len(tc.frame), Length: len(tc.frame)}, tc.frame)
				file = buf.Bytes()
			} else {
				file = writeCapture(t, tc.lt, tc.frame)
			}
			r, err := NewReader(bytes.NewReader(file))
			if err != nil {
				t.Fatal(err)
			}
			if r.LinkType() != tc.lt {
				t.Fatalf("link type %v", r.LinkType())
			}
			var f Frame
			if err := r.Next(&f); err != nil {
				t.Fatal(err)
			}
			if f.Format != tc.format || !bytes.Equal(f.Data, tc.data) || f.Index != 1 || f.Truncated() || !f.Timestamp.Equal(GenEpoch) {
				t.Fatalf("frame %+v", f)
			}
			if err := r.Next(&f); err != io.EOF {
				t.Fatalf("second Next: %v, want EOF", err)
			}
		})
	}
}

func TestReaderPcapng(t *testing.T) {
	var buf bytes.Buffer
	w, err := pcapgo.NewNgWriter(&buf, layers.LinkTypeEthernet)
	if err != nil {
		t.Fatal(err)
	}
	ib, err := w.AddInterface(pcapgo.NgInterface{LinkType: layers.LinkType(LinkTypeERF), SnapLength: Snaplen})
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(w.WritePacket(gopacket.CaptureInfo{Timestamp: GenEpoch, CaptureLength: len(readRequestFrame), Length: len(readRequestFrame)}, readRequestFrame))
	rec := AppendERF(nil, GenEpoch, ERFTypeEthernet, []byte{0, 0, 1, 2, 3}, 5)
	must(w.WritePacket(gopacket.CaptureInfo{Timestamp: GenEpoch, CaptureLength: len(rec), Length: len(rec), InterfaceIndex: ib}, rec))
	must(w.Flush())

	r, err := NewReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	var f Frame
	must(r.Next(&f))
	if f.Format != link.FormatEthernet || !bytes.Equal(f.Data, readRequestFrame) {
		t.Fatalf("frame 1 %+v", f)
	}
	must(r.Next(&f))
	if f.LinkType != LinkTypeERF || f.Format != 0 || f.Index != 2 {
		t.Fatalf("frame 2 (ERF Ethernet record) %+v", f)
	}
	if err := r.Next(&f); err != io.EOF {
		t.Fatalf("got %v, want EOF", err)
	}
}

func TestReaderErrors(t *testing.T) {
	good := writeCapture(t, LinkTypeEthernet, readRequestFrame, readRequestFrame)
	for _, tc := range []struct {
		name       string
		file       []byte
		openErr    error
		nextErr    error
		framesGood int
	}{
		{"empty", nil, ErrNotCapture, nil, 0},
		{"text", []byte("hello, world, this is not a capture"), ErrNotCapture, nil, 0},
		{"header cut", good[:20], ErrTruncated, nil, 0},
		{"record header cut", good[:24+16+len(readRequestFrame)+8], nil, ErrTruncated, 1},
		{"record data cut", good[:len(good)-3], nil, ErrTruncated, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := NewReader(bytes.NewReader(tc.file))
			if tc.openErr != nil {
				if !errors.Is(err, tc.openErr) {
					t.Fatalf("NewReader: %v, want %v", err, tc.openErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var f Frame
			n := 0
			for {
				err = r.Next(&f)
				if err != nil {
					break
				}
				n++
			}
			if !errors.Is(err, tc.nextErr) || n != tc.framesGood {
				t.Fatalf("after %d frames: %v, want %v after %d", n, err, tc.nextErr, tc.framesGood)
			}
		})
	}
	var buf bytes.Buffer
	pw := pcapgo.NewWriter(&buf)
	_ = pw.WriteFileHeader(Snaplen, layers.LinkTypeFDDI)
	var ule *UnsupportedLinkTypeError
	if _, err := NewReader(&buf); !errors.As(err, &ule) || ule.LinkType != 10 {
		t.Fatalf("FDDI capture: %v", err)
	}
}

// A classic pcap header with a snap length of 0 is read as libpcap and
// tshark read it, with the largest snap length, not refused at the first
// record.
func TestReaderSnaplenZero(t *testing.T) {
	file := writeCapture(t, LinkTypeEthernet, readRequestFrame, readRequestFrame)
	binary.LittleEndian.PutUint32(file[16:], 0)
	r, err := NewReader(bytes.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	var f Frame
	n := 0
	for ; ; n++ {
		if err = r.Next(&f); err != nil {
			break
		}
		if !bytes.Equal(f.Data, readRequestFrame) {
			t.Fatalf("frame %d: % x", n, f.Data)
		}
	}
	if err != io.EOF || n != 2 {
		t.Fatalf("after %d frames: %v, want io.EOF after 2", n, err)
	}
}

func FuzzReader(f *testing.F) {
	f.Add(writeCaptureF(LinkTypeEthernet, readRequestFrame))
	f.Add(writeCaptureF(LinkTypeERF, readRequestFrame[:30]))
	f.Add(writeCaptureF(LinkTypeRaw, readRequestFrame[14:]))
	f.Add(cat(ngSHB(), ngIDB(uint16(LinkTypeEthernet), 65535), ngEPB(uint32(len(readRequestFrame)), readRequestFrame)))
	f.Add(cat(ngSHB(), ngIDB(uint16(LinkTypeEthernet), 0), ngSPB(uint32(len(readRequestFrame)), readRequestFrame)))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := NewReader(bytes.NewReader(data))
		if err != nil {
			return
		}
		var fr Frame
		for i := 0; i < 1000; i++ {
			if r.Next(&fr) != nil {
				return
			}
			if fr.Err == nil && len(fr.Data) > len(data) {
				t.Fatal("frame longer than the file")
			}
		}
	})
}

func writeCaptureF(lt LinkType, frames ...[]byte) []byte {
	var buf bytes.Buffer
	w, _ := NewWriter(&buf, lt)
	for _, f := range frames {
		_ = w.WriteFrame(GenEpoch, f)
	}
	return buf.Bytes()
}
