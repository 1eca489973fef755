package pcap

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/goroce/goroce/hca/link"
)

// LinkType is a pcap LINKTYPE_ value (tcpdump.org/linktypes.html).
type LinkType uint32

// Link types goroce reads (and, for Ethernet, raw IP and ERF, writes).
const (
	LinkTypeEthernet   LinkType = 1
	LinkTypeRaw        LinkType = 101 // raw IPv4 or IPv6, told apart by the version nibble
	LinkTypeLinuxSLL   LinkType = 113 // `tcpdump -i any` (cooked v1)
	LinkTypeERF        LinkType = 197
	LinkTypeIPv4       LinkType = 228
	LinkTypeIPv6       LinkType = 229
	LinkTypeInfiniBand LinkType = 247
	LinkTypeLinuxSLL2  LinkType = 276 // `tcpdump -i any` (cooked v2)
)

func (lt LinkType) String() string {
	switch lt {
	case LinkTypeEthernet:
		return "ethernet"
	case LinkTypeRaw:
		return "raw"
	case LinkTypeLinuxSLL:
		return "linux-sll"
	case LinkTypeERF:
		return "erf"
	case LinkTypeIPv4:
		return "ipv4"
	case LinkTypeIPv6:
		return "ipv6"
	case LinkTypeInfiniBand:
		return "infiniband"
	case LinkTypeLinuxSLL2:
		return "linux-sll2"
	}
	return fmt.Sprintf("linktype(%d)", uint32(lt))
}

// LinkTypeFor returns the link type a capture of frames of format f is
// written with: Ethernet → 1, IP → 101 (raw), IB → 197 (ERF records of type
// 0x15; Wireshark cannot open 247).
func LinkTypeFor(f link.Format) (LinkType, error) {
	switch f {
	case link.FormatEthernet:
		return LinkTypeEthernet, nil
	case link.FormatIP:
		return LinkTypeRaw, nil
	case link.FormatIB:
		return LinkTypeERF, nil
	}
	return 0, fmt.Errorf("pcap: no link type for frame format %v", f)
}

// maxSnaplen is the largest record a classic pcap file may hold, whatever
// snap length its header states (libpcap's MAXIMUM_SNAPLEN): a longer
// record is an error from Reader.Next.
const maxSnaplen = 262144

// ErrNotCapture is returned by NewReader for input that is neither pcap nor
// pcapng.
var ErrNotCapture = errors.New("pcap: not a pcap or pcapng file")

// ErrTruncated is returned (wrapped) by Reader.Next when the file ends in the
// middle of a record.
var ErrTruncated = errors.New("pcap: capture file truncated")

// UnsupportedLinkTypeError reports a capture whose link type goroce cannot
// take frames from.
type UnsupportedLinkTypeError struct {
	LinkType LinkType
	// Frame is the record number (Frame.Index) of a pcapng record of such
	// an interface, so that the error says where in the file it is; 0 for
	// a classic file's header.
	Frame int
}

func (e *UnsupportedLinkTypeError) Error() string {
	if e.Frame > 0 {
		return fmt.Sprintf("pcap: frame %d: unsupported link type %d (%v)", e.Frame, uint32(e.LinkType), e.LinkType)
	}
	return fmt.Sprintf("pcap: unsupported link type %d (%v)", uint32(e.LinkType), e.LinkType)
}

// Frame is one record of a capture file.
type Frame struct {
	// Index is the 1-based record number in the file (Wireshark's frame
	// number).
	Index int
	// Timestamp and WireLen come from the record header (for ERF, from the
	// ERF header).
	Timestamp time.Time
	WireLen   int
	// LinkType is the link type of the record's interface.
	LinkType LinkType
	// Format says what Data starts with; 0 means the record holds something
	// goroce does not look into (an ERF record that is not InfiniBand, a
	// cooked-capture frame that is not IP).
	Format link.Format
	// Data is the frame with any capture encapsulation (ERF header, Linux
	// cooked header) removed. It is valid until the next call to Next.
	Data []byte
	// Err is set when the record's capture encapsulation itself is
	// malformed (an ERF record shorter than its header); Format is then 0.
	Err error
}

// Truncated reports whether the capture kept fewer bytes than were on the
// wire (a snap length), which makes CRCs unverifiable.
func (f *Frame) Truncated() bool { return len(f.Data) < f.WireLen }

// Reader reads frames from a pcap or pcapng file.
type Reader struct {
	pcap     *pcapgo.Reader
	ng       *pcapgo.NgReader
	ngc      *ngChecker // maps the link types pcapgo reports back to 16 bits
	linkType LinkType   // classic pcap: the file's; pcapng: the first interface's
	index    int
}

// NewReader reads the file header from r and returns a Reader. It detects
// pcap (either byte order, µs or ns, optionally gzipped) and pcapng.
func NewReader(r io.Reader) (*Reader, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	magic, err := br.Peek(4)
	if err != nil {
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return nil, fmt.Errorf("%w: %d bytes is too short for a file header", ErrNotCapture, len(magic))
		}
		return nil, err
	}
	switch {
	case binary.BigEndian.Uint32(magic) == 0x0A0D0D0A:
		ngc := newNgChecker(br)
		ng, err := pcapgo.NewNgReader(ngc, pcapgo.NgReaderOptions{WantMixedLinkType: true})
		if err != nil {
			return nil, headerError(err)
		}
		// pcapgo has read the section header only: it reads interface
		// blocks as it meets them, so ngc reads ahead to the first.
		rd := &Reader{ng: ng, ngc: ngc}
		rd.linkType, _ = ngc.firstInterface()
		return rd, nil
	case isPcapMagic(magic), magic[0] == 0x1F && magic[1] == 0x8B:
		// The file header is read here, and handed to pcapgo with its snap
		// length clamped (so a gzipped file is unpacked here too).
		var src io.Reader = br
		if !isPcapMagic(magic) {
			zr, err := gzip.NewReader(br)
			if err != nil {
				return nil, headerError(err)
			}
			src = zr
		}
		var hdr [24]byte
		if _, err := io.ReadFull(src, hdr[:]); err != nil {
			return nil, headerError(err)
		}
		var lt LinkType
		if isPcapMagic(hdr[:]) {
			// pcapgo keeps the link type in a uint8; read the full 32 bits.
			order := binary.ByteOrder(binary.BigEndian)
			if binary.LittleEndian.Uint32(hdr[:]) == 0xA1B2C3D4 || binary.LittleEndian.Uint32(hdr[:]) == 0xA1B23C4D {
				order = binary.LittleEndian
			}
			lt = LinkType(order.Uint32(hdr[20:]))
			// pcapgo sizes its record buffer by the file's snap length
			// (and the first record's capture length, which it bounds by
			// the snap length), unchecked: a 4 GiB snap length in a
			// 100-byte file was a 4 GiB allocation, a fatal out of memory.
			// libpcap takes no record longer than maxSnaplen either. A
			// snap length of 0 is libpcap's "unknown": it reads such a
			// file with the maximum (as tshark does), where pcapgo would
			// refuse every record.
			if s := order.Uint32(hdr[16:]); s == 0 || s > maxSnaplen {
				order.PutUint32(hdr[16:], maxSnaplen)
			}
		}
		pr, err := pcapgo.NewReader(io.MultiReader(bytes.NewReader(hdr[:]), src))
		if err != nil {
			return nil, headerError(err)
		}
		if lt == 0 {
			lt = LinkType(pr.LinkType())
		}
		rd := &Reader{pcap: pr, linkType: lt}
		if !supported(lt) {
			return nil, &UnsupportedLinkTypeError{LinkType: lt}
		}
		return rd, nil
	}
	return nil, fmt.Errorf("%w: magic %x", ErrNotCapture, magic)
}

func isPcapMagic(m []byte) bool {
	switch binary.LittleEndian.Uint32(m) {
	case 0xA1B2C3D4, 0xD4C3B2A1, 0xA1B23C4D, 0x4D3CB2A1:
		return true
	}
	return false
}

func headerError(err error) error {
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return fmt.Errorf("%w: file header cut short", ErrTruncated)
	}
	return fmt.Errorf("pcap: bad file header: %w", err)
}

func supported(lt LinkType) bool {
	switch lt {
	case LinkTypeEthernet, LinkTypeRaw, LinkTypeIPv4, LinkTypeIPv6, LinkTypeERF,
		LinkTypeInfiniBand, LinkTypeLinuxSLL, LinkTypeLinuxSLL2:
		return true
	}
	return false
}

// LinkType returns the link type of the file (of its first interface for
// pcapng, whose interfaces may differ, and 0 for a pcapng file with no
// interface before its first packet; Frame.LinkType is per record).
func (r *Reader) LinkType() LinkType { return r.linkType }

// Next reads the next record into f. It returns io.EOF at the clean end of
// the file, an error wrapping ErrTruncated when the file stops inside a
// record, and an *UnsupportedLinkTypeError for a pcapng record of an
// interface goroce cannot read. f.Data is valid until the next call.
func (r *Reader) Next(f *Frame) error {
	var (
		data []byte
		ci   gopacket.CaptureInfo
		err  error
		lt   = r.linkType
	)
	if r.ng != nil {
		data, ci, err = r.ng.ZeroCopyReadPacketData()
		if err == nil && len(ci.AncillaryData) > 0 {
			if l, ok := ci.AncillaryData[0].(layers.LinkType); ok {
				lt = r.ngc.linkType(uint8(l))
			}
		}
	} else {
		data, ci, err = r.pcap.ZeroCopyReadPacketData()
	}
	if err != nil {
		if err == io.EOF {
			return io.EOF
		}
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("%w after frame %d: %v", ErrTruncated, r.index, err)
		}
		return fmt.Errorf("pcap: reading frame %d: %w", r.index+1, err)
	}
	r.index++
	*f = Frame{Index: r.index, Timestamp: ci.Timestamp, WireLen: ci.Length, LinkType: lt, Data: data}
	switch lt {
	case LinkTypeEthernet:
		f.Format = link.FormatEthernet
	case LinkTypeRaw, LinkTypeIPv4, LinkTypeIPv6:
		f.Format = link.FormatIP
	case LinkTypeInfiniBand:
		f.Format = link.FormatIB
	case LinkTypeERF:
		h, err := parseERF(data)
		if err != nil {
			f.Err = err
			return nil
		}
		f.Timestamp = h.ts
		f.WireLen = int(h.wlen)
		f.Data = data[h.hdrLen : h.hdrLen+h.payLen]
		if h.typ == ERFTypeInfiniBand {
			f.Format = link.FormatIB
		}
	case LinkTypeLinuxSLL, LinkTypeLinuxSLL2:
		hlen, protoOff := 16, 14
		if lt == LinkTypeLinuxSLL2 {
			hlen, protoOff = 20, 0
		}
		if len(data) >= hlen {
			switch binary.BigEndian.Uint16(data[protoOff:]) {
			case 0x0800, 0x86DD:
				f.Format = link.FormatIP
				f.Data = data[hlen:]
				f.WireLen -= hlen
			}
		}
	default:
		return &UnsupportedLinkTypeError{LinkType: lt, Frame: r.index}
	}
	return nil
}
