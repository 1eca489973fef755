package pcap

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
)

// pcapgo's NgReader trusts a pcapng file's lengths: it sizes its packet
// buffer by an interface's snap length or a record's capture length and
// discards "block length - capture length" bytes after it, all unchecked.
// A 100-byte file with a 4 GiB snap length was a 4 GiB allocation, a fatal
// out of memory, and a capture length beyond its block made it read the
// next blocks as packet data. ngChecker sits between the file and pcapgo:
// it passes the file through block by block, each read whole (at most
// maxNgBlock bytes) and checked first, clamps interface snap lengths to
// maxSnaplen as the classic reader does, and fails the read at the first
// block whose lengths do not add up, which Reader.Next reports for that
// record.

// maxNgBlock bounds one pcapng block: a full maxSnaplen record with its
// headers, padding and generous room for options.
const maxNgBlock = maxSnaplen + 64<<10

// errNgBlock wraps every malformed-block error of ngChecker.
var errNgBlock = errors.New("pcapng: malformed block")

// pcapng block types goroce checks (pcapng spec §4).
const (
	ngSectionHeader   = 0x0A0D0D0A
	ngInterface       = 1
	ngObsoletePacket  = 2
	ngSimplePacket    = 3
	ngInterfaceStats  = 5
	ngEnhancedPacket  = 6
	ngByteOrderMagic  = 0x1A2B3C4D
	ngBlockHeaderSize = 8 // type, total length
)

type ngChecker struct {
	r     *bufio.Reader
	order binary.ByteOrder
	// snap0 is the snap length of the section's first interface (what a
	// simple packet block's capture length is bounded by); 0 before one.
	snap0 uint32
	iface int // interfaces seen in this section
	// linkTypes are the distinct link types of the file's interfaces, in
	// the order first seen. pcapgo keeps an interface's 16-bit link type
	// in a uint8 (layers.LinkType): 276 (Linux cooked v2, what dumpcap
	// writes for "-i any") became 20 and 257 became 1, Ethernet. Each
	// interface block reaches pcapgo with its link type replaced by its
	// index here, which Reader maps back; the list only grows, so
	// ngChecker reading blocks ahead of pcapgo does not matter.
	linkTypes []LinkType
	block     []byte
	left      []byte // checked bytes not yet read
	typ       uint32 // the type of the block in left
	err       error
}

func newNgChecker(r *bufio.Reader) *ngChecker { return &ngChecker{r: r} }

func (c *ngChecker) Read(p []byte) (int, error) {
	for len(c.left) == 0 {
		if c.err != nil {
			return 0, c.err
		}
		c.err = c.next()
	}
	n := copy(p, c.left)
	c.left = c.left[n:]
	return n, nil
}

func (c *ngChecker) fail(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errNgBlock}, a...)...)
}

// next reads and checks one block into c.left.
func (c *ngChecker) next() error {
	hdr, err := c.r.Peek(12)
	switch {
	case err == io.EOF && len(hdr) == 0:
		return io.EOF
	case err == io.EOF || err == io.ErrUnexpectedEOF:
		return io.ErrUnexpectedEOF
	case err != nil:
		return err
	}
	if binary.BigEndian.Uint32(hdr) == ngSectionHeader {
		// The section's byte order comes from its magic, after the
		// length; every block after it follows that order.
		switch {
		case binary.BigEndian.Uint32(hdr[8:]) == ngByteOrderMagic:
			c.order = binary.BigEndian
		case binary.LittleEndian.Uint32(hdr[8:]) == ngByteOrderMagic:
			c.order = binary.LittleEndian
		default:
			return c.fail("section header byte-order magic %x", hdr[8:12])
		}
		c.snap0, c.iface = 0, 0
	}
	if c.order == nil {
		return c.fail("block before the section header")
	}
	typ, total := c.order.Uint32(hdr), c.order.Uint32(hdr[4:])
	if total < 12 || total%4 != 0 || total > maxNgBlock {
		return c.fail("block type %d of %d bytes", typ, total)
	}
	if cap(c.block) < int(total) {
		c.block = make([]byte, total)
	}
	b := c.block[:total]
	if _, err := io.ReadFull(c.r, b); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	if c.order.Uint32(b[total-4:]) != total {
		return c.fail("block type %d: trailing length %d, leading %d", typ, c.order.Uint32(b[total-4:]), total)
	}
	body := b[ngBlockHeaderSize : total-4]
	// packet checks that a packet block's capture length fits in the room
	// its body has after the fixed fields.
	packet := func(fixed int, caplen uint32) error {
		if len(body) < fixed {
			return c.fail("packet block type %d of %d bytes", typ, total)
		}
		if room := uint32(len(body) - fixed); caplen > room {
			return c.fail("packet block type %d: capture length %d, %d bytes of room", typ, caplen, room)
		}
		return nil
	}
	switch typ {
	case ngSectionHeader:
		if len(body) < 16 { // magic, version, section length
			return c.fail("section header of %d bytes", total)
		}
		if err := c.options(typ, body[16:]); err != nil {
			return err
		}
	case ngInterface:
		if len(body) < 8 {
			return c.fail("interface block of %d bytes", total)
		}
		if err := c.options(typ, body[8:]); err != nil {
			return err
		}
		lt := LinkType(c.order.Uint16(body))
		code := slices.Index(c.linkTypes, lt)
		if code < 0 {
			if len(c.linkTypes) > 0xFF {
				return c.fail("interface of link type %d: more than 256 link types", lt)
			}
			code = len(c.linkTypes)
			c.linkTypes = append(c.linkTypes, lt)
		}
		c.order.PutUint16(body, uint16(code))
		if c.order.Uint32(body[4:]) > maxSnaplen {
			c.order.PutUint32(body[4:], maxSnaplen)
		}
		if c.iface == 0 {
			c.snap0 = c.order.Uint32(body[4:])
		}
		c.iface++
	case ngInterfaceStats:
		if len(body) < 12 { // interface, timestamp
			return c.fail("interface statistics block of %d bytes", total)
		}
		if err := c.options(typ, body[12:]); err != nil {
			return err
		}
	case ngEnhancedPacket, ngObsoletePacket:
		if len(body) >= 20 {
			if err := packet(20, c.order.Uint32(body[12:])); err != nil {
				return err
			}
		} else {
			return packet(20, 0)
		}
	case ngSimplePacket:
		if len(body) < 4 {
			return packet(4, 0)
		}
		caplen := c.order.Uint32(body)
		if c.snap0 != 0 {
			caplen = min(caplen, c.snap0)
		}
		if err := packet(4, caplen); err != nil {
			return err
		}
	}
	c.left, c.typ = b, typ
	return nil
}

// firstInterface reads ahead to the file's first interface block and
// returns its link type. pcapgo, reading a file of mixed link types, reads
// an interface block only when it meets it among the packets, so after the
// section header it knows of no interface yet. Called when pcapgo has
// taken the section header (and nothing after it), firstInterface checks
// and drops the blocks before the interface that pcapgo would skip anyway
// (name resolution, decryption secrets, custom blocks) and leaves the
// interface block in c.left for pcapgo. It stops without one at a block
// pcapgo reads (a packet or statistics block before any interface, another
// section header), at the end of the file or at a malformed block, whose
// error c keeps for pcapgo's next read as before.
func (c *ngChecker) firstInterface() (LinkType, bool) {
	for len(c.linkTypes) == 0 && len(c.left) == 0 && c.err == nil {
		if c.err = c.next(); c.err != nil {
			break
		}
		switch c.typ {
		case ngSectionHeader, ngInterface, ngInterfaceStats, ngEnhancedPacket, ngObsoletePacket, ngSimplePacket:
			// Left for pcapgo, which ends the loop.
		default:
			c.left = nil
		}
	}
	if len(c.linkTypes) == 0 {
		return 0, false
	}
	return c.linkTypes[0], true
}

// Option codes ngChecker looks into.
const (
	ngOptEndOfOptions = 0
	ngOptTSResol      = 9 // if_tsresol, in an interface block
)

// options checks the options of a block pcapgo parses (section header,
// interface, interface statistics). pcapgo reads option after option by
// their own lengths, unchecked against the block's: an option running past
// its block made it take the next blocks for options (and lose their
// packets, the file then "ending" cleanly at its end), and a section header
// or statistics block too short for its fixed fields did the same. An
// if_tsresol of 10^-64 or 2^-64 (or more) is a zero units-per-second in
// pcapgo's uint64, an integer divide by zero; libpcap refuses an exponent
// past 19 (decimal) or 63 (binary), and so does ngChecker. A zero-length
// if_tsresol made pcapgo use whatever byte a previous option left in its
// buffer; libpcap wants exactly one byte.
func (c *ngChecker) options(typ uint32, opts []byte) error {
	for len(opts) > 0 {
		if len(opts) < 4 {
			return c.fail("block type %d: option header cut short", typ)
		}
		code, n := c.order.Uint16(opts), int(c.order.Uint16(opts[2:]))
		if code == ngOptEndOfOptions {
			if n != 0 {
				return c.fail("block type %d: end of options of length %d", typ, n)
			}
			return nil
		}
		padded := (n + 3) &^ 3
		if padded > len(opts)-4 {
			return c.fail("block type %d: option %d of %d bytes, %d bytes of room", typ, code, n, len(opts)-4)
		}
		if typ == ngInterface && code == ngOptTSResol {
			if n != 1 {
				return c.fail("if_tsresol of %d bytes, want 1", n)
			}
			v := opts[4]
			if e := v & 0x7F; (v&0x80 != 0 && e > 63) || (v&0x80 == 0 && e > 19) {
				return c.fail("if_tsresol %#x: resolution out of range", v)
			}
		}
		opts = opts[4+padded:]
	}
	return nil
}

// linkType returns the link type of an interface whose (rewritten) link
// type pcapgo reports as code.
func (c *ngChecker) linkType(code uint8) LinkType {
	if int(code) < len(c.linkTypes) {
		return c.linkTypes[code]
	}
	return LinkType(code) // not reached: pcapgo sees only rewritten blocks
}
