package wire_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// A tiny stdlib-only reader for classic pcap (both byte orders, µs and ns)
// and pcapng (SHB, IDB, EPB, SPB), enough for the golden captures. The wire
// package itself never reads files.

// Link types the tests understand.
const (
	linkEthernet = 1
	linkRaw      = 101
	linkERF      = 197
)

type capFrame struct {
	n        int // 1-based frame number in the file
	linkType int
	data     []byte
}

func readCapture(path string) ([]capFrame, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(b) >= 4 && binary.LittleEndian.Uint32(b) == 0x0A0D0D0A {
		return parsePcapNG(b)
	}
	return parsePcap(b)
}

func parsePcap(b []byte) ([]capFrame, error) {
	if len(b) < 24 {
		return nil, errors.New("pcap: short global header")
	}
	var bo binary.ByteOrder
	switch binary.LittleEndian.Uint32(b) {
	case 0xA1B2C3D4, 0xA1B23C4D:
		bo = binary.LittleEndian
	case 0xD4C3B2A1, 0x4D3CB2A1:
		bo = binary.BigEndian
	default:
		return nil, fmt.Errorf("pcap: bad magic %x", b[:4])
	}
	lt := int(bo.Uint32(b[20:]) & 0xFFFF)
	var out []capFrame
	for off := 24; off < len(b); {
		if len(b)-off < 16 {
			return nil, errors.New("pcap: short record header")
		}
		incl := int(bo.Uint32(b[off+8:]))
		off += 16
		if incl > len(b)-off {
			return nil, errors.New("pcap: short record")
		}
		out = append(out, capFrame{n: len(out) + 1, linkType: lt, data: b[off : off+incl]})
		off += incl
	}
	return out, nil
}

func parsePcapNG(b []byte) ([]capFrame, error) {
	var bo binary.ByteOrder = binary.LittleEndian
	var ifaces []int
	var out []capFrame
	for off := 0; off < len(b); {
		if len(b)-off < 12 {
			return nil, errors.New("pcapng: short block")
		}
		typ := binary.LittleEndian.Uint32(b[off:])
		if typ == 0x0A0D0D0A { // SHB: byte-order magic decides
			if binary.LittleEndian.Uint32(b[off+8:]) == 0x1A2B3C4D {
				bo = binary.LittleEndian
			} else {
				bo = binary.BigEndian
			}
			ifaces = ifaces[:0]
		} else {
			typ = bo.Uint32(b[off:])
		}
		blen := int(bo.Uint32(b[off+4:]))
		if blen < 12 || blen > len(b)-off {
			return nil, errors.New("pcapng: bad block length")
		}
		body := b[off+8 : off+blen-4]
		switch typ {
		case 1: // IDB
			ifaces = append(ifaces, int(bo.Uint16(body)))
		case 6: // EPB
			if len(body) < 20 {
				return nil, errors.New("pcapng: short EPB")
			}
			id, capl := int(bo.Uint32(body)), int(bo.Uint32(body[12:]))
			if id >= len(ifaces) || capl > len(body)-20 {
				return nil, errors.New("pcapng: bad EPB")
			}
			out = append(out, capFrame{n: len(out) + 1, linkType: ifaces[id], data: body[20 : 20+capl]})
		case 3: // SPB
			if len(ifaces) == 0 || len(body) < 4 {
				return nil, errors.New("pcapng: bad SPB")
			}
			l := min(int(bo.Uint32(body)), len(body)-4)
			out = append(out, capFrame{n: len(out) + 1, linkType: ifaces[0], data: body[4 : 4+l]})
		}
		off += blen
	}
	return out, nil
}

// erfInfiniBand unwraps an ERF record of type InfiniBand (0x15), returning
// the IB packet (LRH first) or nil for other record types.
func erfInfiniBand(rec []byte) []byte {
	if len(rec) < 16 {
		return nil
	}
	typ := rec[8]
	off := 16
	for t := typ; t&0x80 != 0; { // extension headers, 8 bytes each
		if len(rec) < off+8 {
			return nil
		}
		t = rec[off]
		off += 8
	}
	if typ&0x7F != 0x15 {
		return nil
	}
	wlen := int(binary.BigEndian.Uint16(rec[14:]))
	if wlen > len(rec)-off {
		wlen = len(rec) - off
	}
	return rec[off : off+wlen]
}

func goldenCaptures(t testing.TB) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "captures", "*.pcap"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden captures in testdata/captures: %v", err)
	}
	return files
}

// sharedVector returns the path of a file in ../shared/vectors, skipping
// the test when it is absent (the vectors are never copied into the repo).
func sharedVector(t testing.TB, name string) string {
	t.Helper()
	p := findSharedVector(name)
	if p == "" {
		t.Skipf("shared vector %s not present (tests read it from ../shared/vectors and never copy it)", name)
	}
	return p
}

// findSharedVector looks for ../shared/vectors/name relative to the
// repository root (the package directory is one level deeper).
func findSharedVector(name string) string {
	for _, dir := range []string{"../../shared/vectors", "../shared/vectors"} {
		p := filepath.Join(dir, name)
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

func TestPcapReaderPcapNG(t *testing.T) {
	// Build a minimal little-endian pcapng: SHB, IDB (Ethernet), one EPB.
	le := binary.LittleEndian
	var b []byte
	blk := func(typ uint32, body []byte) {
		for len(body)%4 != 0 {
			body = append(body, 0)
		}
		n := uint32(12 + len(body))
		b = le.AppendUint32(b, typ)
		b = le.AppendUint32(b, n)
		b = append(b, body...)
		b = le.AppendUint32(b, n)
	}
	shb := le.AppendUint32(nil, 0x1A2B3C4D)
	shb = le.AppendUint16(shb, 1)
	shb = le.AppendUint16(shb, 0)
	shb = le.AppendUint64(shb, ^uint64(0))
	blk(0x0A0D0D0A, shb)
	idb := le.AppendUint16(nil, 1)
	idb = le.AppendUint16(idb, 0)
	idb = le.AppendUint32(idb, 65535)
	blk(1, idb)
	epb := le.AppendUint32(nil, 0)
	epb = le.AppendUint64(epb, 0)
	epb = le.AppendUint32(epb, 3)
	epb = le.AppendUint32(epb, 3)
	epb = append(epb, 1, 2, 3)
	blk(6, epb)
	fr, err := parsePcapNG(b)
	if err != nil || len(fr) != 1 || fr[0].linkType != linkEthernet || string(fr[0].data) != "\x01\x02\x03" {
		t.Fatalf("parsePcapNG = %v, %v", fr, err)
	}
}
