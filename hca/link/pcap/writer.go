package pcap

import (
	"encoding/binary"
	"fmt"
	"io"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
)

// Snaplen is the snap length written into file headers. It covers the
// largest frame any goroce link carries (jumbo Ethernet, IB MTU 4096) with
// room to spare; ERF records are limited to 65535 bytes by their rlen field.
const Snaplen = 65535

// erfFlagVLen marks a varying-length ERF record (flags bit 2). The ERF
// "truncated" bit (3) means the capture card ran out of buffer, not a snap
// length, so a short capture is told only by rlen < wlen.
const erfFlagVLen = 0x04

// Writer writes frames to a classic pcap file (microsecond timestamps,
// little-endian) through pcapgo. For LinkTypeERF every frame is a native
// InfiniBand packet (LRH through VCRC) and is wrapped in an ERF record of
// type 0x15, the form Wireshark opens. A Writer is not safe for concurrent
// use; the Tap serialises through one goroutine.
type Writer struct {
	pw  *pcapgo.Writer
	lt  LinkType
	rec []byte // ERF record scratch, reused
}

// NewWriter writes a pcap file header for link type lt to w.
func NewWriter(w io.Writer, lt LinkType) (*Writer, error) {
	switch lt {
	case LinkTypeEthernet, LinkTypeRaw, LinkTypeIPv4, LinkTypeIPv6, LinkTypeERF, LinkTypeInfiniBand:
	default:
		return nil, &UnsupportedLinkTypeError{LinkType: lt}
	}
	pw := pcapgo.NewWriter(w)
	if err := pw.WriteFileHeader(Snaplen, layers.LinkType(lt)); err != nil {
		return nil, fmt.Errorf("pcap: writing file header: %w", err)
	}
	wr := &Writer{pw: pw, lt: lt}
	if lt == LinkTypeERF {
		wr.rec = make([]byte, 0, ERFHeaderLen+Snaplen)
	}
	return wr, nil
}

// LinkType returns the link type the file was written with.
func (w *Writer) LinkType() LinkType { return w.lt }

// WriteFrame writes one whole frame with timestamp ts.
func (w *Writer) WriteFrame(ts time.Time, frame []byte) error {
	return w.WriteFrameLen(ts, frame, len(frame))
}

// WriteFrameLen writes the first len(data) bytes of a frame that was wireLen
// bytes long (wireLen ≥ len(data); more means the capture cut it short).
func (w *Writer) WriteFrameLen(ts time.Time, data []byte, wireLen int) error {
	if wireLen < len(data) {
		return fmt.Errorf("pcap: wire length %d below captured length %d", wireLen, len(data))
	}
	if w.lt != LinkTypeERF {
		if len(data) > Snaplen {
			data = data[:Snaplen]
		}
		return w.pw.WritePacket(gopacket.CaptureInfo{
			Timestamp: ts, CaptureLength: len(data), Length: wireLen}, data)
	}
	if wireLen > Snaplen-ERFHeaderLen {
		return fmt.Errorf("pcap: %d-byte frame does not fit an ERF record", wireLen)
	}
	w.rec = AppendERF(w.rec[:0], ts, ERFTypeInfiniBand, data, wireLen)
	return w.pw.WritePacket(gopacket.CaptureInfo{
		Timestamp: ts, CaptureLength: len(w.rec), Length: len(w.rec)}, w.rec)
}

// AppendERF appends an ERF record of type typ holding data (the first
// len(data) bytes of a wireLen-byte frame) to dst and returns the result.
//
// The layout follows the Endace ERF format and what Wireshark's sample IB
// capture holds: 64-bit little-endian timestamp (seconds << 32 | binary
// fraction), type, flags (varying length), rlen = record length rounded up
// to 8 as DAG cards emit it, lctr 0, wlen; the pcap record itself carries no
// padding (its caplen is 16 + len(data), less than rlen), exactly as in that
// sample.
func AppendERF(dst []byte, ts time.Time, typ uint8, data []byte, wireLen int) []byte {
	var h [ERFHeaderLen]byte
	sec := uint64(ts.Unix())
	frac := (uint64(ts.Nanosecond())<<32 + 5e8) / 1e9 // rounded
	binary.LittleEndian.PutUint64(h[0:], sec<<32|frac)
	h[8] = typ & 0x7F
	h[9] = erfFlagVLen
	rlen := (ERFHeaderLen + len(data) + 7) &^ 7
	binary.BigEndian.PutUint16(h[10:], uint16(rlen))
	binary.BigEndian.PutUint16(h[12:], 0)
	binary.BigEndian.PutUint16(h[14:], uint16(wireLen))
	dst = append(dst, h[:]...)
	return append(dst, data...)
}
