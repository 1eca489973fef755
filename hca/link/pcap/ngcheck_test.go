package pcap

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/goroce/goroce/hca/link"
)

// ngBlock builds a little-endian pcapng block of type typ around body
// (padded to 4 bytes); total, when non-zero, overrides both length fields.
func ngBlock(typ uint32, body []byte, total uint32) []byte {
	for len(body)%4 != 0 {
		body = append(body, 0)
	}
	n := uint32(12 + len(body))
	if total != 0 {
		n = total
	}
	b := binary.LittleEndian.AppendUint32(nil, typ)
	b = binary.LittleEndian.AppendUint32(b, n)
	b = append(b, body...)
	return binary.LittleEndian.AppendUint32(b, n)
}

func ngSHB() []byte {
	body := binary.LittleEndian.AppendUint32(nil, ngByteOrderMagic)
	body = binary.LittleEndian.AppendUint16(body, 1)
	body = binary.LittleEndian.AppendUint16(body, 0)
	body = binary.LittleEndian.AppendUint64(body, ^uint64(0)) // section length unknown
	return ngBlock(ngSectionHeader, body, 0)
}

func ngIDB(lt uint16, snap uint32) []byte {
	body := binary.LittleEndian.AppendUint16(nil, lt)
	body = binary.LittleEndian.AppendUint16(body, 0)
	body = binary.LittleEndian.AppendUint32(body, snap)
	return ngBlock(ngInterface, body, 0)
}

func ngEPB(caplen uint32, data []byte) []byte {
	body := make([]byte, 20)
	binary.LittleEndian.PutUint32(body[12:], caplen)
	binary.LittleEndian.PutUint32(body[16:], uint32(len(data)))
	return ngBlock(ngEnhancedPacket, append(body, data...), 0)
}

func ngSPB(origlen uint32, data []byte) []byte {
	return ngBlock(ngSimplePacket, append(binary.LittleEndian.AppendUint32(nil, origlen), data...), 0)
}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// A pcapng file whose lengths do not add up is refused record by record
// with an error, never read as a huge allocation (pcapgo sized its buffer
// by the interface's snap length and the record's capture length,
// unchecked: a 4 GiB snap length in a 100-byte file was a fatal out of
// memory) or as the next blocks' bytes.
func TestReaderPcapngLengths(t *testing.T) {
	frame := readRequestFrame
	eth := uint16(LinkTypeEthernet)
	huge := ngEPB(uint32(len(frame)), frame)
	binary.LittleEndian.PutUint32(huge[4:], 0xFFFFFFF0)
	trail := ngEPB(uint32(len(frame)), frame)
	binary.LittleEndian.PutUint32(trail[len(trail)-4:], 4)
	for _, tc := range []struct {
		name    string
		file    []byte
		frames  int   // frames read before the error
		openErr bool  // NewReader fails
		nextErr error // the error after them (io.EOF: a clean end)
	}{
		{"good", cat(ngSHB(), ngIDB(eth, 65535), ngEPB(uint32(len(frame)), frame)), 1, false, io.EOF},
		{"4 GiB snap length", cat(ngSHB(), ngIDB(eth, 0xFFFFFFF0), ngEPB(uint32(len(frame)), frame)), 1, false, io.EOF},
		{"capture length past its block", cat(ngSHB(), ngIDB(eth, 0), ngEPB(0xFFFFFF00, frame)), 0, false, errNgBlock},
		{"capture length one past", cat(ngSHB(), ngIDB(eth, 0), ngEPB(uint32(len(frame))+4, frame)), 0, false, errNgBlock},
		{"4 GiB block", cat(ngSHB(), ngIDB(eth, 0), huge), 0, false, errNgBlock},
		{"trailing length", cat(ngSHB(), ngIDB(eth, 0), trail), 0, false, errNgBlock},
		{"simple packet, 4 GiB, no snap length", cat(ngSHB(), ngIDB(eth, 0), ngSPB(0xFFFFFFFF, frame)), 0, false, errNgBlock},
		{"simple packet within the snap length", cat(ngSHB(), ngIDB(eth, uint32(len(frame))), ngSPB(0xFFFFFFFF, frame)), 1, false, io.EOF},
		{"cut inside a block", cat(ngSHB(), ngIDB(eth, 0), ngEPB(uint32(len(frame)), frame))[:60], 0, false, ErrTruncated},
		{"short section header", cat(ngBlock(ngSectionHeader, binary.LittleEndian.AppendUint32(nil, ngByteOrderMagic), 0), ngIDB(eth, 0)), 0, true, nil},
		{"odd block length", cat(ngSHB(), ngIDB(eth, 0), ngBlock(ngEnhancedPacket, make([]byte, 20), 35)), 0, false, errNgBlock},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := NewReader(bytes.NewReader(tc.file))
			if tc.openErr {
				if err == nil {
					t.Fatal("NewReader accepted it")
				}
				return
			}
			if err != nil {
				t.Fatalf("NewReader: %v", err)
			}
			var f Frame
			for i := 0; i < tc.frames; i++ {
				if err := r.Next(&f); err != nil {
					t.Fatalf("frame %d: %v", i+1, err)
				}
				if !bytes.Equal(f.Data, frame) {
					t.Fatalf("frame %d: %x", i+1, f.Data)
				}
			}
			err = r.Next(&f)
			if !errors.Is(err, tc.nextErr) {
				t.Fatalf("after %d frames: %v, want %v", tc.frames, err, tc.nextErr)
			}
		})
	}
}

// ngOpt builds one little-endian pcapng option (value padded to 4 bytes).
func ngOpt(code uint16, value []byte) []byte {
	b := binary.LittleEndian.AppendUint16(nil, code)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(value)))
	b = append(b, value...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// ngIDBOpts is ngIDB with options after the fixed fields.
func ngIDBOpts(lt uint16, snap uint32, opts ...[]byte) []byte {
	body := binary.LittleEndian.AppendUint16(nil, lt)
	body = binary.LittleEndian.AppendUint16(body, 0)
	body = binary.LittleEndian.AppendUint32(body, snap)
	return ngBlock(ngInterface, cat(append([][]byte{body}, opts...)...), 0)
}

// The options of the blocks pcapgo parses (section header, interface,
// interface statistics) are checked before pcapgo sees them: it reads them
// by their own lengths, so one running past its block made it read the
// following packet blocks as options and then report a clean end of file,
// and an if_tsresol of 10^-64 or 2^-64 was an integer divide by zero, a
// panic. Each is an error at the block, after the frames before it.
func TestReaderPcapngOptions(t *testing.T) {
	frame := readRequestFrame
	eth := uint16(LinkTypeEthernet)
	epb := ngEPB(uint32(len(frame)), frame)
	end := ngOpt(0, nil)
	isb := func(opts ...[]byte) []byte {
		return ngBlock(ngInterfaceStats, cat(append([][]byte{make([]byte, 12)}, opts...)...), 0)
	}
	for _, tc := range []struct {
		name    string
		file    []byte
		frames  int
		nextErr error
	}{
		{"good options", cat(ngSHB(), ngIDBOpts(eth, 0, ngOpt(2, []byte("rxe0")), ngOpt(ngOptTSResol, []byte{9}), end), epb,
			isb(ngOpt(1, []byte("stats")), end), epb), 2, io.EOF},
		{"if_tsresol 10^-64", cat(ngSHB(), ngIDBOpts(eth, 0, ngOpt(ngOptTSResol, []byte{64}), end), epb), 0, errNgBlock},
		{"if_tsresol 2^-64", cat(ngSHB(), ngIDBOpts(eth, 0, ngOpt(ngOptTSResol, []byte{0xC0}), end), epb), 0, errNgBlock},
		{"if_tsresol 10^-20", cat(ngSHB(), ngIDBOpts(eth, 0, ngOpt(ngOptTSResol, []byte{20}), end), epb), 0, errNgBlock},
		{"if_tsresol empty", cat(ngSHB(), ngIDBOpts(eth, 0, ngOpt(2, []byte{0xC0}), ngOpt(ngOptTSResol, nil), end), epb), 0, errNgBlock},
		{"interface option past its block", cat(ngSHB(), ngIDB(eth, 0), epb,
			ngIDBOpts(eth, 0, binary.LittleEndian.AppendUint32(nil, 2|0xFFF0<<16)), epb, epb), 1, errNgBlock},
		{"statistics block without its fields", cat(ngSHB(), ngIDB(eth, 0), epb, ngBlock(ngInterfaceStats, nil, 0), epb, epb), 1, errNgBlock},
		{"statistics option past its block", cat(ngSHB(), ngIDB(eth, 0), epb,
			isb(binary.LittleEndian.AppendUint32(nil, 1|0x100<<16)), epb, epb), 1, errNgBlock},
		{"section option past its block", cat(ngSHB(), ngIDB(eth, 0), epb,
			ngBlock(ngSectionHeader, cat(ngSHB()[8:24], binary.LittleEndian.AppendUint32(nil, 1|0x100<<16)), 0),
			ngIDB(eth, 0), epb), 1, errNgBlock},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := NewReader(bytes.NewReader(tc.file))
			if err != nil {
				t.Fatalf("NewReader: %v", err)
			}
			var f Frame
			for i := 0; i < tc.frames; i++ {
				if err := r.Next(&f); err != nil {
					t.Fatalf("frame %d: %v", i+1, err)
				}
				if !bytes.Equal(f.Data, frame) {
					t.Fatalf("frame %d: %x", i+1, f.Data)
				}
			}
			err = r.Next(&f)
			if !errors.Is(err, tc.nextErr) {
				t.Fatalf("after %d frames: %v, want %v", tc.frames, err, tc.nextErr)
			}
		})
	}
}

// A pcapng interface's link type is read in its full 16 bits: pcapgo keeps
// it in a uint8, so Linux cooked v2 (276, what dumpcap writes for "-i any")
// came out as 20, unsupported, and 257 as 1, Ethernet, its frames then
// verified as Ethernet.
func TestReaderPcapngWideLinkTypes(t *testing.T) {
	ip := readRequestFrame[14:]
	sll2 := append([]byte{0x08, 0x00, 0, 0, 0, 0, 0, 2, 0, 1, 0, 6, 0, 0x0c, 0x29, 0x89, 0xa2, 0xe5, 0, 0}, ip...)
	epb := func(iface uint32, data []byte) []byte {
		b := ngEPB(uint32(len(data)), data)
		binary.LittleEndian.PutUint32(b[8:], iface)
		return b
	}
	file := cat(ngSHB(),
		ngIDB(uint16(LinkTypeLinuxSLL2), 0), ngIDB(257, 0), ngIDB(uint16(LinkTypeEthernet), 0),
		epb(0, sll2), epb(1, readRequestFrame), epb(2, readRequestFrame),
		// A second section, its interfaces in another order.
		ngSHB(), ngIDB(257, 0), ngIDB(uint16(LinkTypeLinuxSLL2), 0),
		epb(1, sll2), epb(0, readRequestFrame))
	r, err := NewReader(bytes.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	var f Frame
	if err := r.Next(&f); err != nil {
		t.Fatalf("frame 1: %v", err)
	}
	if f.LinkType != LinkTypeLinuxSLL2 || f.Format != link.FormatIP || !bytes.Equal(f.Data, ip) {
		t.Fatalf("frame 1: link type %v, format %v", f.LinkType, f.Format)
	}
	var ule *UnsupportedLinkTypeError
	// The error names the record, as the others of Next do.
	if err := r.Next(&f); !errors.As(err, &ule) || ule.LinkType != 257 || ule.Frame != 2 || !strings.Contains(err.Error(), "frame 2:") {
		t.Fatalf("frame 2 (link type 257): %v, %+v", err, f)
	}
	if err := r.Next(&f); err != nil || f.LinkType != LinkTypeEthernet || f.Format != link.FormatEthernet {
		t.Fatalf("frame 3: %v, link type %v", err, f.LinkType)
	}
	if err := r.Next(&f); err != nil || f.LinkType != LinkTypeLinuxSLL2 || !bytes.Equal(f.Data, ip) {
		t.Fatalf("frame 4: %v, link type %v", err, f.LinkType)
	}
	if err := r.Next(&f); !errors.As(err, &ule) || ule.LinkType != 257 || ule.Frame != 5 {
		t.Fatalf("frame 5 (link type 257): %v, %+v", err, f)
	}
	if err := r.Next(&f); err != io.EOF {
		t.Fatalf("after 5 frames: %v, want io.EOF", err)
	}
}

// Reader.LinkType of a pcapng file is its first interface's link type, as
// its doc says, whatever blocks pcapgo skips come before that interface and
// however many interfaces follow it. NewReader asked pcapgo for its
// interfaces right after the section header, before pcapgo had read any
// (it reads them as packets are read), so LinkType was 0 for every pcapng
// file.
func TestReaderPcapngLinkType(t *testing.T) {
	frame := readRequestFrame
	eth := uint16(LinkTypeEthernet)
	epb := func(iface uint32) []byte { // frame on the Ethernet interface iface
		b := ngEPB(uint32(len(frame)), frame)
		binary.LittleEndian.PutUint32(b[8:], iface)
		return b
	}
	nrb := ngBlock(4, cat(binary.LittleEndian.AppendUint16(nil, 1), binary.LittleEndian.AppendUint16(nil, 8),
		[]byte{10, 0, 0, 1, 'h', 'o', 's', 't'}, make([]byte, 4)), 0) // name resolution block
	custom := ngBlock(0x40000BAD, make([]byte, 16), 0)
	for _, tc := range []struct {
		name string
		file []byte
		want LinkType
	}{
		{"one interface", cat(ngSHB(), ngIDB(eth, 0), epb(0)), LinkTypeEthernet},
		{"several interfaces", cat(ngSHB(), ngIDB(uint16(LinkTypeLinuxSLL2), 0), ngIDB(eth, 0), ngIDB(189, 0), epb(1), epb(1)), LinkTypeLinuxSLL2},
		{"unsupported first", cat(ngSHB(), ngIDB(189, 0), ngIDB(eth, 0), epb(1)), 189},
		{"blocks before the interface", cat(ngSHB(), nrb, custom, ngIDB(uint16(LinkTypeERF), 0), ngIDB(eth, 0), epb(1), nrb, epb(1)), LinkTypeERF},
		{"section header options", cat(ngBlock(ngSectionHeader, cat(ngSHB()[8:24], ngOpt(4, bytes.Repeat([]byte("a"), 5000)), ngOpt(0, nil)), 0),
			ngIDB(eth, 0), epb(0)), LinkTypeEthernet},
		{"no interface", cat(ngSHB()), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := NewReader(bytes.NewReader(tc.file))
			if err != nil {
				t.Fatalf("NewReader: %v", err)
			}
			if lt := r.LinkType(); lt != tc.want {
				t.Fatalf("LinkType() = %v, want %v", lt, tc.want)
			}
			// Reading ahead to the interface loses no record.
			var f Frame
			n := 0
			for ; ; n++ {
				if err = r.Next(&f); err != nil {
					break
				}
				if !bytes.Equal(f.Data, frame) || f.Index != n+1 {
					t.Fatalf("frame %d: %+v", n+1, f)
				}
			}
			if want := bytes.Count(tc.file, frame); err != io.EOF || n != want {
				t.Fatalf("after %d frames: %v, want io.EOF after %d", n, err, want)
			}
		})
	}
}
