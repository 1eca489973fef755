package pcap

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/wire"
)

// GenPMTU is the path MTU of generated traffic: FIRST and MIDDLE packets
// carry exactly this many payload bytes, LAST and ONLY at most this many.
const GenPMTU = 1024

// GenPacket is one generated frame and what it was built with.
type GenPacket struct {
	Opcode bth.Opcode
	DestQP bth.QPN
	PSN    bth.PSN
	// Syndrome is the AETH syndrome when the opcode has an AETH.
	Syndrome bth.Syndrome
	Frame    []byte
	Time     time.Time
}

// GenCapture is one generated capture file.
type GenCapture struct {
	Name     string // file name, e.g. "roce2-ipv4.pcap"
	Kind     wire.Kind
	Framing  wire.Framing
	LinkType LinkType
	Packets  []GenPacket
}

// WriteTo writes c as a pcap file (LINKTYPE_ETHERNET, or ERF records for
// native IB).
func (c *GenCapture) WriteTo(w io.Writer) (int64, error) {
	cw := &countingWriter{w: w}
	pw, err := NewWriter(cw, c.LinkType)
	if err != nil {
		return cw.n, err
	}
	for i := range c.Packets {
		if err := pw.WriteFrame(c.Packets[i].Time, c.Packets[i].Frame); err != nil {
			return cw.n, err
		}
	}
	return cw.n, nil
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// GenOptions tune Generate.
type GenOptions struct {
	// Seed makes PSNs, IP IDs and payload bytes; the same seed gives
	// byte-identical captures.
	Seed uint64
	// RD adds one packet of every Reliable Datagram opcode to the native IB
	// captures. RD is off by default: the RoCE annexes do not carry it, and
	// neither rxe nor any shipping HCA implements it, so such packets only
	// exercise decoders. tshark 4.0.17 misplaces the RDETH of RD packets
	// by 8 bytes and calls four of the short ones malformed
	// (docs/interop.md, "Wireshark and RD"); the bytes follow IBA.
	RD bool
}

// Generate builds, for each encapsulation (roce2-ipv4, roce2-ipv6, roce1,
// ib, ib-grh), a capture holding a well-formed packet of every opcode valid
// in it: the RC, UC and UD opcodes everywhere, CNP on RoCEv2 only, RD on
// native IB when asked. Traffic is laid out as the real conversation a pair
// of rxe-like HCAs would have at path MTU 1024: multi-packet SEND and WRITE
// messages, READ requests answered by FIRST/MIDDLE/LAST responses, atomics
// answered with ATOMIC_ACKNOWLEDGE, an RNR NAK and retry, a PSN sequence
// error NAK after a lost packet and the go-back-N retransmission, and NAKs
// for invalid request, remote access and remote operational errors on QPs
// of their own (each NAK moves a QP to the error state). Every frame goes
// through wire.Finish, so lengths, ICRC and VCRC are computed, never typed
// in. Generate allocates freely; it is for tools and tests.
func Generate(opts GenOptions) ([]GenCapture, error) {
	kinds := []struct {
		name    string
		kind    wire.Kind
		framing wire.Framing
		lt      LinkType
	}{
		{"roce2-ipv4.pcap", wire.KindRoCEv2IPv4, wire.FramingEthernet, LinkTypeEthernet},
		{"roce2-ipv6.pcap", wire.KindRoCEv2IPv6, wire.FramingEthernet, LinkTypeEthernet},
		{"roce1.pcap", wire.KindRoCEv1, wire.FramingEthernet, LinkTypeEthernet},
		{"ib.pcap", wire.KindIB, wire.FramingIB, LinkTypeERF},
		{"ib-grh.pcap", wire.KindIBGRH, wire.FramingIB, LinkTypeERF},
	}
	var out []GenCapture
	for i, k := range kinds {
		g := newGen(k.kind, k.framing, opts.Seed+uint64(i)*0x9E3779B97F4A7C15)
		g.conversation()
		if opts.RD && (k.kind == wire.KindIB || k.kind == wire.KindIBGRH) {
			g.rd()
		}
		if g.err != nil {
			return nil, fmt.Errorf("pcap: generating %s: %w", k.name, g.err)
		}
		out = append(out, GenCapture{Name: k.name, Kind: k.kind, Framing: k.framing, LinkType: k.lt, Packets: g.pkts})
	}
	return out, nil
}

// host is one side of the generated conversation.
type host struct {
	mac  [6]byte
	ip4  netip.Addr
	ip6  netip.Addr
	gid  [16]byte // RoCEv1 / IB GRH GID
	lid  uint16
	ipid uint16
}

type gen struct {
	kind    wire.Kind
	framing wire.Framing
	rng     *rand.Rand
	hosts   [2]host // 0 = A (requester), 1 = B (responder)
	now     time.Time
	pkts    []GenPacket
	err     error
}

const genText = "goroce pcap gen: synthetic RoCE/InfiniBand payload, path MTU 1024. "

// GenEpoch is the timestamp of the first generated frame.
var GenEpoch = time.Date(2026, 1, 15, 12, 0, 0, 0, time.UTC)

func newGen(k wire.Kind, f wire.Framing, seed uint64) *gen {
	g := &gen{kind: k, framing: f, rng: rand.New(rand.NewPCG(seed, 0x676f726f6365)), now: GenEpoch}
	// Locally administered unicast MACs (QEMU's 52:54:00 prefix, as the rxe
	// lab uses), documentation-free private addresses, link-local GIDs
	// from the EUI-64 of the MAC, and SM-assigned-looking LIDs.
	g.hosts[0] = host{mac: [6]byte{0x52, 0x54, 0x00, 0x77, 0x00, 0x03},
		ip4: netip.MustParseAddr("10.77.0.3"), ip6: netip.MustParseAddr("fd77::3"),
		gid: netip.MustParseAddr("fe80::5054:ff:fe77:3").As16(), lid: 0x0003}
	g.hosts[1] = host{mac: [6]byte{0x52, 0x54, 0x00, 0x77, 0x00, 0x02},
		ip4: netip.MustParseAddr("10.77.0.2"), ip6: netip.MustParseAddr("fd77::2"),
		gid: netip.MustParseAddr("fe80::5054:ff:fe77:2").As16(), lid: 0x0004}
	for i := range g.hosts {
		g.hosts[i].ipid = uint16(g.rng.Uint32()) | 1
	}
	return g
}

// qp is one RC/UC/UD queue pair pair: A's QPN, B's QPN, the next request
// PSN (A→B) and B's MSN.
type qpPair struct {
	a, b bth.QPN
	psn  bth.PSN
	msn  uint32
}

func (g *gen) newPair(a, b bth.QPN) *qpPair {
	return &qpPair{a: a, b: b, psn: bth.PSN(g.rng.Uint32() & bth.PSNMask)}
}

// pkt describes one packet to emit.
type pkt struct {
	fromB   bool
	op      bth.Opcode
	destQP  bth.QPN
	srcQP   bth.QPN // for the UDP source port
	psn     bth.PSN
	ackReq  bool
	se      bool
	becn    bool
	payload int
	fill    func(t []byte, info *bth.OpInfo)
}

func (g *gen) emit(p pkt) {
	if g.err != nil {
		return
	}
	info := p.op.Info()
	pad := -p.payload & 3
	n := info.HdrLen + p.payload + pad
	off := wire.MaxHeadroom
	buf := make([]byte, off+n+wire.Tailroom)
	t := buf[off : off+n]
	bth.Header(t).Encode(&bth.Fields{Opcode: p.op, SE: p.se, PadCnt: pad, PKey: bth.DefaultPKey,
		BECN: p.becn, DestQP: p.destQP, AckReq: p.ackReq, PSN: p.psn})
	if p.fill != nil {
		p.fill(t, info)
	}
	// ASCII text: binary noise can look like EoIB or iSER to Wireshark's
	// payload heuristics and be dissected as something it is not.
	pay := t[info.HdrLen : info.HdrLen+p.payload]
	start := g.rng.IntN(len(genText))
	for i := range pay {
		pay[i] = genText[(start+i)%len(genText)]
	}
	src, dst := &g.hosts[0], &g.hosts[1]
	if p.fromB {
		src, dst = dst, src
	}
	a := wire.Addr{Kind: g.kind, SrcMAC: src.mac, DstMAC: dst.mac, HopLimit: 64,
		SrcPort: wire.UDPSourcePort(p.srcQP, p.destQP), SLID: src.lid, DLID: dst.lid}
	switch g.kind {
	case wire.KindRoCEv2IPv4:
		a.SrcIP, a.DstIP = src.ip4, dst.ip4
		a.DontFragment = true
		a.IPID = src.ipid
		src.ipid++
	case wire.KindRoCEv2IPv6:
		a.SrcIP, a.DstIP = src.ip6, dst.ip6
		// rxe sends 0, but Wireshark flags a zero UDP checksum over IPv6
		// as an error; the checksum is masked out of the ICRC anyway.
		a.UDPChecksum = true
	case wire.KindRoCEv1, wire.KindIBGRH:
		a.SGID, a.DGID = src.gid, dst.gid
	}
	if p.op == bth.OpCNP {
		// A ConnectX CNP leaves with DSCP 48 and ECT(0) (wire-spec §5.3).
		a.TrafficClass = 0xC2
	}
	frame, err := wire.Finish(buf, off, n, g.framing, &a)
	if err != nil {
		g.err = fmt.Errorf("%v: %w", p.op, err)
		return
	}
	gp := GenPacket{Opcode: p.op, DestQP: p.destQP, PSN: p.psn, Frame: frame, Time: g.now}
	if info.AETH != 0 {
		gp.Syndrome = bth.AETH(t[info.AETH:]).Syndrome()
	}
	g.pkts = append(g.pkts, gp)
	g.now = g.now.Add(time.Duration(3+g.rng.IntN(40)) * time.Microsecond)
}

// Realistic memory handles: rxe keys are index<<8 | 8-bit key, user VAs
// look like glibc heap pages.
func (g *gen) rkey() bth.RKey {
	return bth.RKey((0x100+g.rng.Uint32()%0x4000)<<8 | g.rng.Uint32()&0xFF)
}
func (g *gen) va() uint64 { return 0x0000_5580_0000_0000 | uint64(g.rng.Uint32())<<12 }

// req emits a request packet A→B on pair q and advances the PSN by one.
func (g *gen) req(q *qpPair, op bth.Opcode, payload int, ackReq bool, fill func([]byte, *bth.OpInfo)) bth.PSN {
	psn := q.psn
	g.emit(pkt{op: op, destQP: q.b, srcQP: q.a, psn: psn, ackReq: ackReq, payload: payload, fill: fill})
	q.psn = q.psn.Add(1)
	return psn
}

// resp emits a response B→A carrying an AETH with syndrome s.
func (g *gen) resp(q *qpPair, op bth.Opcode, psn bth.PSN, s bth.Syndrome, payload int, fill func([]byte, *bth.OpInfo)) {
	g.emit(pkt{fromB: true, op: op, destQP: q.a, srcQP: q.b, psn: psn, payload: payload,
		fill: func(t []byte, info *bth.OpInfo) {
			if info.AETH != 0 {
				a := bth.AETH(t[info.AETH:])
				a.SetSyndrome(s)
				a.SetMSN(q.msn)
			}
			if fill != nil {
				fill(t, info)
			}
		}})
}

func (g *gen) ack(q *qpPair, psn bth.PSN) {
	g.resp(q, bth.OpRCAcknowledge, psn, bth.SyndromeACKUnlimited, 0, nil)
}

func withRETH(va uint64, k bth.RKey, n uint32) func([]byte, *bth.OpInfo) {
	return func(t []byte, info *bth.OpInfo) {
		r := bth.RETH(t[info.RETH:])
		r.SetVA(va)
		r.SetRKey(k)
		r.SetDMALen(n)
	}
}

func withImm(v uint32) func([]byte, *bth.OpInfo) {
	return func(t []byte, info *bth.OpInfo) { bth.ImmDt(t[info.ImmDt:]).SetImm(v) }
}

// send emits a SEND of n bytes on an RC or UC pair: FIRST/MIDDLE.../LAST or
// ONLY, the last packet with ImmDt or IETH if asked. It returns the PSN of
// the last packet. RC responders ACK it (rc).
func (g *gen) send(q *qpPair, prefix bth.Opcode, n int, last, only bth.Opcode, fill func([]byte, *bth.OpInfo)) bth.PSN {
	rc := prefix == bth.TransportRC
	if n <= GenPMTU {
		return g.req(q, only, n, rc, fill)
	}
	g.req(q, prefix|bth.OpRCSendFirst, GenPMTU, false, nil)
	for n -= GenPMTU; n > GenPMTU; n -= GenPMTU {
		g.req(q, prefix|bth.OpRCSendMiddle, GenPMTU, false, nil)
	}
	return g.req(q, last, n, rc, fill)
}

// write emits an RDMA WRITE of n bytes; the RETH goes on FIRST/ONLY.
func (g *gen) write(q *qpPair, prefix bth.Opcode, n int, last, only bth.Opcode, imm func([]byte, *bth.OpInfo)) bth.PSN {
	rc := prefix == bth.TransportRC
	reth := withRETH(g.va(), g.rkey(), uint32(n))
	if n <= GenPMTU {
		return g.req(q, only, n, rc, func(t []byte, info *bth.OpInfo) {
			reth(t, info)
			if imm != nil {
				imm(t, info)
			}
		})
	}
	g.req(q, prefix|bth.OpRCRDMAWriteFirst, GenPMTU, false, reth)
	for n -= GenPMTU; n > GenPMTU; n -= GenPMTU {
		g.req(q, prefix|bth.OpRCRDMAWriteMiddle, GenPMTU, false, nil)
	}
	return g.req(q, last, n, rc, imm)
}

// conversation emits the whole exchange for g's encapsulation.
func (g *gen) conversation() {
	rc := g.newPair(0x000011, 0x000012)
	uc := g.newPair(0x000013, 0x000014)
	ud := g.newPair(0x000015, 0x000016)
	const (
		RC = bth.TransportRC
		UC = bth.TransportUC
	)

	// RC SEND: 3-packet message, then SEND with immediate in 2 packets.
	rc.msn++
	g.ack(rc, g.send(rc, RC, 2381, bth.OpRCSendLast, bth.OpRCSendOnly, nil))
	rc.msn++
	g.ack(rc, g.send(rc, RC, 1500, bth.OpRCSendLastWithImmediate, bth.OpRCSendOnlyWithImmediate, withImm(g.rng.Uint32())))

	// SEND ONLY finds no receive WQE: RNR NAK (min_rnr_timer 12, 0.64 ms),
	// the requester waits and resends with the same PSN, then the ACK.
	psn := g.send(rc, RC, 64, bth.OpRCSendLast, bth.OpRCSendOnly, nil)
	g.resp(rc, bth.OpRCAcknowledge, psn, bth.RNRNAKSyndrome(12), 0, nil)
	g.now = g.now.Add(640 * time.Microsecond)
	rc.psn = psn
	rc.msn++
	g.ack(rc, g.send(rc, RC, 64, bth.OpRCSendLast, bth.OpRCSendOnly, nil))
	rc.msn++
	g.ack(rc, g.send(rc, RC, 20, bth.OpRCSendLastWithImmediate, bth.OpRCSendOnlyWithImmediate, withImm(g.rng.Uint32())))

	// SEND with invalidate, 2 packets and 1.
	inv := func(t []byte, info *bth.OpInfo) { bth.IETH(t[info.IETH:]).SetRKey(g.rkey()) }
	rc.msn++
	g.ack(rc, g.send(rc, RC, 1200, bth.OpRCSendLastWithInvalidate, bth.OpRCSendOnlyWithInvalidate, inv))
	rc.msn++
	g.ack(rc, g.send(rc, RC, 48, bth.OpRCSendLastWithInvalidate, bth.OpRCSendOnlyWithInvalidate, inv))

	// RDMA WRITE: 3 packets; with immediate in 2; ONLY; ONLY with immediate.
	rc.msn++
	g.ack(rc, g.write(rc, RC, 2100, bth.OpRCRDMAWriteLast, bth.OpRCRDMAWriteOnly, nil))
	rc.msn++
	g.ack(rc, g.write(rc, RC, 1100, bth.OpRCRDMAWriteLastWithImmediate, bth.OpRCRDMAWriteOnlyWithImmediate, withImm(g.rng.Uint32())))
	rc.msn++
	g.ack(rc, g.write(rc, RC, 128, bth.OpRCRDMAWriteLast, bth.OpRCRDMAWriteOnly, nil))
	rc.msn++
	g.ack(rc, g.write(rc, RC, 8, bth.OpRCRDMAWriteLast, bth.OpRCRDMAWriteOnlyWithImmediate, withImm(g.rng.Uint32())))

	// RDMA READ of 2560 bytes: the request consumes 3 PSNs, one per
	// response; FIRST and LAST carry an AETH, MIDDLE none.
	rc.msn++
	psn = rc.psn
	g.emit(pkt{op: bth.OpRCRDMAReadRequest, destQP: rc.b, srcQP: rc.a, psn: psn, ackReq: true,
		fill: withRETH(g.va(), g.rkey(), 2560)})
	rc.psn = rc.psn.Add(3)
	g.resp(rc, bth.OpRCRDMAReadResponseFirst, psn, bth.SyndromeACKUnlimited, GenPMTU, nil)
	g.resp(rc, bth.OpRCRDMAReadResponseMiddle, psn.Add(1), 0, GenPMTU, nil)
	g.resp(rc, bth.OpRCRDMAReadResponseLast, psn.Add(2), bth.SyndromeACKUnlimited, 512, nil)
	// A small READ: one ONLY response.
	rc.msn++
	psn = g.req(rc, bth.OpRCRDMAReadRequest, 0, true, withRETH(g.va(), g.rkey(), 100))
	g.resp(rc, bth.OpRCRDMAReadResponseOnly, psn, bth.SyndromeACKUnlimited, 100, nil)

	// Atomics on an 8-byte-aligned counter, answered with the original value.
	orig := g.rng.Uint64() >> 16
	atomic := func(op bth.Opcode, swapAdd, cmp uint64) {
		rc.msn++
		va := g.va() + 8*uint64(g.rng.IntN(64))
		k := g.rkey()
		psn := g.req(rc, op, 0, true, func(t []byte, info *bth.OpInfo) {
			a := bth.AtomicETH(t[info.AtomicETH:])
			a.SetVA(va)
			a.SetRKey(k)
			a.SetSwapAdd(swapAdd)
			a.SetCompare(cmp)
		})
		o := orig
		g.resp(rc, bth.OpRCAtomicAcknowledge, psn, bth.SyndromeACKUnlimited, 0, func(t []byte, info *bth.OpInfo) {
			bth.AtomicAckETH(t[info.AtomicAckETH:]).SetOrigData(o)
		})
	}
	atomic(bth.OpRCCompareSwap, orig+1, orig) // succeeds: orig → orig+1
	orig++
	atomic(bth.OpRCFetchAdd, 1, 0)
	orig++

	// FLUSH (global visibility, memory-region level) and ATOMIC WRITE: rxe
	// answers both with a zero-length RDMA READ RESPONSE ONLY.
	rc.msn++
	psn = g.req(rc, bth.OpRCFlush, 0, true, func(t []byte, info *bth.OpInfo) {
		bth.FETH(t[info.FETH:]).Set(1, 0)
		withRETH(g.va(), g.rkey(), 4096)(t, info)
	})
	g.resp(rc, bth.OpRCRDMAReadResponseOnly, psn, bth.SyndromeACKUnlimited, 0, nil)
	rc.msn++
	psn = g.req(rc, bth.OpRCAtomicWrite, 8, true, withRETH(g.va()&^7, g.rkey(), 8))
	g.resp(rc, bth.OpRCRDMAReadResponseOnly, psn, bth.SyndromeACKUnlimited, 0, nil)

	// A lost MIDDLE packet: the responder sees a PSN gap at the LAST, sends
	// one PSN-sequence-error NAK carrying the PSN it expects, and the
	// requester goes back N from there.
	reth := withRETH(g.va(), g.rkey(), 3*GenPMTU)
	g.req(rc, bth.OpRCRDMAWriteFirst, GenPMTU, false, reth)
	lost := rc.psn
	rc.psn = rc.psn.Add(1) // the MIDDLE never arrives
	g.req(rc, bth.OpRCRDMAWriteLast, GenPMTU, true, nil)
	g.resp(rc, bth.OpRCAcknowledge, lost, bth.NAKSyndrome(bth.NAKPSNSequenceError), 0, nil)
	rc.psn = lost
	g.req(rc, bth.OpRCRDMAWriteMiddle, GenPMTU, false, nil)
	rc.msn++
	g.ack(rc, g.req(rc, bth.OpRCRDMAWriteLast, GenPMTU, true, nil))

	// Fatal NAKs, each on a QP of its own because it moves the QP to ERR:
	// a SEND larger than the posted receive buffer (invalid request), a
	// WRITE with a stale R_Key (remote access), a SEND whose receive WQE is
	// malformed (remote operational error).
	for i, c := range []struct {
		op   bth.Opcode
		n    int
		code bth.NAKCode
	}{
		{bth.OpRCSendOnly, 1000, bth.NAKInvalidRequest},
		{bth.OpRCRDMAWriteOnly, 256, bth.NAKRemoteAccessError},
		{bth.OpRCSendOnly, 32, bth.NAKRemoteOperational},
	} {
		q := g.newPair(bth.QPN(0x000017+2*i), bth.QPN(0x000018+2*i))
		var fill func([]byte, *bth.OpInfo)
		if c.op == bth.OpRCRDMAWriteOnly {
			fill = withRETH(g.va(), g.rkey(), uint32(c.n))
		}
		psn := g.req(q, c.op, c.n, true, fill)
		g.resp(q, bth.OpRCAcknowledge, psn, bth.NAKSyndrome(c.code), 0, nil)
	}

	// UC: the same message shapes, never acknowledged.
	g.send(uc, UC, 2381, bth.OpUCSendLast, bth.OpUCSendOnly, nil)
	g.send(uc, UC, 1500, bth.OpUCSendLastWithImmediate, bth.OpUCSendOnlyWithImmediate, withImm(g.rng.Uint32()))
	g.send(uc, UC, 64, bth.OpUCSendLast, bth.OpUCSendOnly, nil)
	g.send(uc, UC, 20, bth.OpUCSendLastWithImmediate, bth.OpUCSendOnlyWithImmediate, withImm(g.rng.Uint32()))
	g.write(uc, UC, 2100, bth.OpUCRDMAWriteLast, bth.OpUCRDMAWriteOnly, nil)
	g.write(uc, UC, 1100, bth.OpUCRDMAWriteLastWithImmediate, bth.OpUCRDMAWriteOnlyWithImmediate, withImm(g.rng.Uint32()))
	g.write(uc, UC, 128, bth.OpUCRDMAWriteLast, bth.OpUCRDMAWriteOnly, nil)
	g.write(uc, UC, 8, bth.OpUCRDMAWriteLast, bth.OpUCRDMAWriteOnlyWithImmediate, withImm(g.rng.Uint32()))

	// UD: DETH with the pingpong Q_Key and the sender's QPN, both ways.
	deth := func(src bth.QPN) func([]byte, *bth.OpInfo) {
		return func(t []byte, info *bth.OpInfo) {
			d := bth.DETH(t[info.DETH:])
			d.SetQKey(0x11111111)
			d.SetSrcQP(src)
		}
	}
	g.req(ud, bth.OpUDSendOnly, 512, false, deth(ud.a))
	g.emit(pkt{fromB: true, op: bth.OpUDSendOnlyWithImmediate, destQP: ud.a, srcQP: ud.b,
		psn: bth.PSN(g.rng.Uint32() & bth.PSNMask), payload: GenPMTU, se: true,
		fill: func(t []byte, info *bth.OpInfo) {
			deth(ud.b)(t, info)
			withImm(g.rng.Uint32())(t, info)
		}})

	// CNP (RoCEv2 only): the notification point (B) tells A's RC QP to
	// slow down: BECN set, PSN 0, 16 zero bytes.
	if g.kind == wire.KindRoCEv2IPv4 || g.kind == wire.KindRoCEv2IPv6 {
		g.emit(pkt{fromB: true, op: bth.OpCNP, destQP: rc.a, srcQP: rc.b, becn: true})
	}
}

// rd emits one packet of every RD opcode: requests carry RDETH and DETH,
// responses RDETH only (IBA 9.3.2).
func (g *gen) rd() {
	q := g.newPair(0x000021, 0x000022)
	eec := g.rng.Uint32() & 0xFFFFFF
	for _, op := range bth.Opcodes() {
		if op.Transport() != bth.TransportRD {
			continue
		}
		info := op.Info()
		n := 0
		switch {
		case info.Has(bth.FlagFirst) && !info.Has(bth.FlagLast), info.Has(bth.FlagMiddle):
			n = GenPMTU
		case info.Has(bth.FlagPayload):
			n = 200
		}
		p := pkt{op: op, destQP: q.b, srcQP: q.a, psn: q.psn, payload: n, ackReq: info.Has(bth.FlagLast)}
		if info.Has(bth.FlagResp) {
			p.fromB, p.destQP, p.srcQP = true, q.a, q.b
		}
		va, k := g.va(), g.rkey()
		p.fill = func(t []byte, info *bth.OpInfo) {
			bth.RDETH(t[info.RDETH:]).SetEEContext(eec)
			if info.DETH != 0 {
				d := bth.DETH(t[info.DETH:])
				d.SetQKey(0x11111111)
				d.SetSrcQP(q.a)
			}
			if info.RETH != 0 {
				withRETH(va, k, uint32(max(n, 4096)))(t, info)
			}
			if info.AtomicETH != 0 {
				a := bth.AtomicETH(t[info.AtomicETH:])
				a.SetVA(va)
				a.SetRKey(k)
				a.SetSwapAdd(1)
			}
			if info.AETH != 0 {
				bth.AETH(t[info.AETH:]).SetSyndrome(bth.SyndromeACKUnlimited)
			}
			if info.ImmDt != 0 {
				bth.ImmDt(t[info.ImmDt:]).SetImm(0xC0FFEE)
			}
		}
		g.emit(p)
		q.psn = q.psn.Add(1)
	}
}
