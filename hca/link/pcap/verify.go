package pcap

import (
	"errors"
	"fmt"
	"io"

	"github.com/goroce/goroce/hca/link"
	"github.com/goroce/goroce/wire"
)

// Counts is the outcome of verifying captures: frames whose CRCs verify,
// RoCE/IB frames that are malformed or whose CRCs do not verify, frames
// that are not RoCE/IB at all (ARP, the TCP side channel, non-IB ERF
// records), and the records of pcapng interfaces of a link type goroce
// cannot read (USB, NULL, ...: an *UnsupportedLinkTypeError from Next),
// which are skipped.
type Counts struct {
	OK, Bad, Other, Skipped int
}

// Add adds c2 to c.
func (c *Counts) Add(c2 Counts) {
	c.OK += c2.OK
	c.Bad += c2.Bad
	c.Other += c2.Other
	c.Skipped += c2.Skipped
}

// String gives the summary line of `goroce pcap verify`; it names the
// skipped records only when there are some.
func (c Counts) String() string {
	if c.Skipped > 0 {
		return fmt.Sprintf("%d ok, %d bad, %d other, %d skipped", c.OK, c.Bad, c.Other, c.Skipped)
	}
	return fmt.Sprintf("%d ok, %d bad, %d other", c.OK, c.Bad, c.Other)
}

// FramingFor returns the wire framing of frames of link format f.
func FramingFor(f link.Format) (wire.Framing, bool) {
	switch f {
	case link.FormatEthernet:
		return wire.FramingEthernet, true
	case link.FormatIP:
		return wire.FramingIP, true
	case link.FormatIB:
		return wire.FramingIB, true
	}
	return 0, false
}

// VerifyOptions tune Verify.
type VerifyOptions struct {
	// Quiet suppresses the per-frame lines of good frames; bad frames are
	// always listed.
	Quiet bool
}

// Verify reads the capture in r and checks every RoCE/IB frame in it with
// wire.Packet.Decode (all length fields, opcode, pad, ICRC, and the VCRC of
// native IB). It writes one line per RoCE/IB frame to out:
//
//	 1 roce2-ipv4 RC_SEND_ONLY                      qp=0x000011 psn=0x1de136 ICRC ok
//	12 ib         RC_ACKNOWLEDGE                    qp=0x870408 psn=0xd40a55 ICRC ok VCRC ok
//	 7 ethernet   BAD: wire: inconsistent length field at offset 16: UDP length
//
// The number is the record number in the file (Wireshark's frame number).
// Frames that are not RoCE/IB are counted as Other and not listed. The
// records of a pcapng interface whose link type goroce cannot read are
// counted as Skipped and the others verified, as tshark shows them all;
// after the frames one line per such link type says how many were skipped:
//
//	skipped 8 records of link type 189, which goroce cannot read
//
// The error is non-nil when the file cannot be read to its end (not a
// capture, a classic pcap file of an unsupported link type, truncated); the
// counts (and skip lines) then cover the records read before it.
func Verify(r io.Reader, out io.Writer, opts VerifyOptions) (Counts, error) {
	var c Counts
	rd, err := NewReader(r)
	if err != nil {
		return c, err
	}
	var (
		f       Frame
		p       wire.Packet
		skipped []skipCount // per link type, in the order first met
		ule     *UnsupportedLinkTypeError
	)
	defer func() {
		for _, s := range skipped {
			fmt.Fprintf(out, "skipped %d records of link type %d, which goroce cannot read\n", s.n, uint32(s.lt))
		}
	}()
	for {
		err := rd.Next(&f)
		if err == io.EOF {
			return c, nil
		}
		if errors.As(err, &ule) && ule.Frame > 0 {
			c.Skipped++
			skipped = countSkip(skipped, ule.LinkType)
			continue
		}
		if err != nil {
			return c, err
		}
		if f.Err != nil {
			c.Bad++
			fmt.Fprintf(out, "%6d %-10s BAD: %v\n", f.Index, f.LinkType, f.Err)
			continue
		}
		framing, ok := FramingFor(f.Format)
		if !ok {
			c.Other++
			continue
		}
		switch verifyFrame(out, &f, framing, &p, opts) {
		case verdictOK:
			c.OK++
		case verdictBad:
			c.Bad++
		default:
			c.Other++
		}
	}
}

// skipCount counts the skipped records of one link type.
type skipCount struct {
	lt LinkType
	n  int
}

func countSkip(s []skipCount, lt LinkType) []skipCount {
	for i := range s {
		if s[i].lt == lt {
			s[i].n++
			return s
		}
	}
	return append(s, skipCount{lt, 1})
}

type verdict uint8

const (
	verdictOther verdict = iota
	verdictOK
	verdictBad
)

// verifyFrame decodes one frame and prints its line (nothing for a frame
// that is not RoCE/IB).
func verifyFrame(out io.Writer, f *Frame, framing wire.Framing, p *wire.Packet, opts VerifyOptions) verdict {
	err := p.Decode(f.Data, framing)
	switch err {
	case nil:
		if !opts.Quiet {
			printPacket(out, f, p, true, true)
		}
		return verdictOK
	case wire.ErrNotRoCE:
		return verdictOther
	case wire.ErrBadICRC, wire.ErrBadVCRC:
		// The descriptor is complete: compute both CRCs so the line says
		// which of them is wrong.
		icrcOK := wire.ICRC(f.Data, p) == p.ICRC()
		vcrcOK := true
		if p.VCRCOff >= 0 {
			vcrcOK = wire.CRC16IB(f.Data[p.LRHOff:p.VCRCOff]) == p.VCRC()
		}
		printPacket(out, f, p, icrcOK, vcrcOK)
		return verdictBad
	}
	// A structural error: Explain repeats the decode and says where.
	reason := wire.Explain(f.Data, framing)
	if reason == nil {
		reason = err
	}
	if f.Truncated() {
		fmt.Fprintf(out, "%6d %-10s BAD: captured %d of %d bytes (snap length), cannot verify: %v\n",
			f.Index, framing, len(f.Data), f.WireLen, reason)
		return verdictBad
	}
	fmt.Fprintf(out, "%6d %-10s BAD: %v\n", f.Index, framing, reason)
	return verdictBad
}

func printPacket(out io.Writer, f *Frame, p *wire.Packet, icrcOK, vcrcOK bool) {
	fmt.Fprintf(out, "%6d %-10s %-33s qp=0x%06x psn=0x%06x ICRC %s",
		f.Index, p.Kind, p.Opcode, uint32(p.DestQP), uint32(p.PSN), okBad(icrcOK))
	if p.VCRCOff >= 0 {
		fmt.Fprintf(out, " VCRC %s", okBad(vcrcOK))
	}
	if !icrcOK && f.Truncated() {
		fmt.Fprintf(out, " (captured %d of %d bytes)", len(f.Data), f.WireLen)
	}
	fmt.Fprintln(out)
}

func okBad(ok bool) string {
	if ok {
		return "ok"
	}
	return "BAD"
}
