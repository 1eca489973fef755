package transport_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/transport"
	tt "github.com/goroce/goroce/transport/transporttest"
)

// capturesDir holds the golden kernel-rxe captures (read-only, shared).
const capturesDir = "../../shared/captures"

// capPkt is one RoCEv2 packet of a capture: BTH through pad (ICRC removed)
// and which side sent it (0 = the side that sent the first RoCE packet).
type capPkt struct {
	from int
	b    []byte
}

// readRoCE reads a classic pcap (Ethernet link type) with a minimal
// stdlib reader and returns the RoCEv2 packets (UDP port 4791, IPv4 or
// IPv6) in capture order.
func readRoCE(path string) ([]capPkt, error) {
	d, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(d) < 24 {
		return nil, errors.New("short pcap")
	}
	var bo binary.ByteOrder
	switch binary.LittleEndian.Uint32(d) {
	case 0xa1b2c3d4, 0xa1b23c4d:
		bo = binary.LittleEndian
	case 0xd4c3b2a1, 0x4d3cb2a1:
		bo = binary.BigEndian
	default:
		return nil, errors.New("not a pcap file")
	}
	if lt := bo.Uint32(d[20:]); lt != 1 {
		return nil, fmt.Errorf("link type %d, want Ethernet", lt)
	}
	var out []capPkt
	var first []byte // source address of the first RoCE packet
	for off := 24; off+16 <= len(d); {
		incl := int(bo.Uint32(d[off+8:]))
		off += 16
		if off+incl > len(d) {
			return nil, errors.New("truncated record")
		}
		f := d[off : off+incl]
		off += incl
		if len(f) < 14 {
			continue
		}
		et, l3 := binary.BigEndian.Uint16(f[12:]), f[14:]
		if et == 0x8100 && len(f) >= 18 {
			et, l3 = binary.BigEndian.Uint16(f[16:]), f[18:]
		}
		var src, udp []byte
		switch et {
		case 0x0800:
			if len(l3) < 20 || l3[9] != 17 {
				continue
			}
			ihl := int(l3[0]&0xF) * 4
			tot := int(binary.BigEndian.Uint16(l3[2:]))
			if tot > len(l3) || ihl+8 > tot {
				continue
			}
			src, udp = l3[12:16], l3[ihl:tot]
		case 0x86DD:
			if len(l3) < 48 || l3[6] != 17 {
				continue
			}
			pl := int(binary.BigEndian.Uint16(l3[4:]))
			if 40+pl > len(l3) {
				continue
			}
			src, udp = l3[8:24], l3[40:40+pl]
		default:
			continue
		}
		if binary.BigEndian.Uint16(udp[2:]) != 4791 {
			continue
		}
		ul := int(binary.BigEndian.Uint16(udp[4:]))
		if ul > len(udp) || ul < 8+bth.HeaderLen+4 {
			continue
		}
		p := capPkt{b: append([]byte(nil), udp[8:ul-4]...)}
		if first == nil {
			first = append([]byte(nil), src...)
		}
		if !bytes.Equal(src, first) {
			p.from = 1
		}
		out = append(out, p)
	}
	return out, nil
}

// capMsg is a message reconstructed from a capture's request packets.
type capMsg struct {
	wr      transport.SendWR
	payload []byte
	length  uint32
}

// messages groups one side's request packets into work requests, in PSN
// order. Retransmissions (a FIRST/ONLY whose PSN already started a message)
// extend nothing twice, and a message whose FIRST was lost is built from
// its retransmission.
func messages(pkts []capPkt, from int, pmtu uint32) []capMsg {
	type building struct {
		msg   capMsg
		first bth.PSN
		npk   uint32
		done  bool
	}
	var list []*building
	byFirst := map[bth.PSN]*building{}
	var cur *building
	var base bth.PSN
	for _, p := range pkts {
		h := bth.Header(p.b)
		oi := h.Opcode().Info()
		if p.from != from || !oi.Has(bth.FlagReq) {
			continue
		}
		if len(list) == 0 {
			base = h.PSN()
		}
		if oi.Has(bth.FlagFirst) {
			if b, ok := byFirst[h.PSN()]; ok {
				cur = b
			} else {
				cur = &building{first: h.PSN()}
				byFirst[h.PSN()] = cur
				list = append(list, cur)
			}
		}
		if cur == nil || cur.done || h.PSN() != cur.first.Add(cur.npk) {
			continue
		}
		pay := p.b[oi.HdrLen : len(p.b)-h.PadCnt()]
		w := &cur.msg.wr
		if oi.Has(bth.FlagFirst) {
			w.Flags = transport.SendSignaled
			base := h.Opcode() &^ 0xE0
			switch {
			case oi.Has(bth.FlagSend):
				w.Opcode = transport.WRSend
			case oi.Has(bth.FlagWrite):
				w.Opcode = transport.WRRDMAWrite
			case oi.Has(bth.FlagRead):
				w.Opcode = transport.WRRDMARead
			case base == bth.OpRCCompareSwap:
				w.Opcode = transport.WRAtomicCmpAndSwp
			case base == bth.OpRCFetchAdd:
				w.Opcode = transport.WRAtomicFetchAndAdd
			}
			if oi.RETH != 0 {
				r := bth.RETH(p.b[oi.RETH:])
				w.RemoteAddr, w.RKey = r.VA(), r.RKey()
				cur.msg.length = r.DMALen()
			}
			if oi.AtomicETH != 0 {
				a := bth.AtomicETH(p.b[oi.AtomicETH:])
				w.RemoteAddr, w.RKey = a.VA(), a.RKey()
				if w.Opcode == transport.WRAtomicCmpAndSwp {
					w.CompareAdd, w.Swap = a.Compare(), a.SwapAdd()
				} else {
					w.CompareAdd = a.SwapAdd()
				}
				cur.msg.length = 8
			}
			if oi.DETH != 0 {
				d := bth.DETH(p.b[oi.DETH:])
				w.RemoteQKey, w.RemoteQPN = d.QKey(), h.DestQP()
			}
		}
		cur.npk++
		cur.msg.payload = append(cur.msg.payload, pay...)
		if oi.Has(bth.FlagLast) {
			cur.done = true
			if oi.ImmDt != 0 {
				w.Imm = bth.ImmDt(p.b[oi.ImmDt:]).Imm()
				if w.Opcode == transport.WRSend {
					w.Opcode = transport.WRSendWithImm
				} else {
					w.Opcode = transport.WRRDMAWriteWithImm
				}
			}
			if oi.IETH != 0 {
				w.InvRKey = bth.IETH(p.b[oi.IETH:]).RKey()
				w.Opcode = transport.WRSendWithInv
			}
			if h.SE() {
				w.Flags |= transport.SendSolicited
			}
			if w.Opcode != transport.WRRDMARead && !isAtomic(w.Opcode) {
				cur.msg.length = uint32(len(cur.msg.payload))
			}
		}
	}
	sort.Slice(list, func(i, j int) bool { return list[i].first.Sub(base) < list[j].first.Sub(base) })
	out := make([]capMsg, 0, len(list))
	for i, b := range list {
		b.msg.wr.ID = uint64(i + 1)
		out = append(out, b.msg)
	}
	return out
}

// stream returns side from's packets of one class (requests or responses).
func stream(pkts []capPkt, from int, resp bool) [][]byte {
	var out [][]byte
	for _, p := range pkts {
		oi := bth.Header(p.b).Opcode().Info()
		if p.from == from && oi.Has(bth.FlagResp) == resp {
			out = append(out, p.b)
		}
	}
	return out
}

// TestCaptureReplay rebuilds the workload of each kernel-rxe capture (the
// same QPNs, start PSNs, R_Keys, VAs, payloads and MTU), runs it through two
// engines over a clean wire, and checks that every packet each engine emits
// equals the captured one byte for byte (BTH, every ETH, payload, pad): the
// requests of both sides and the responses (ACK PSN/syndrome/MSN, READ
// response segmentation, atomic ACK original data).
func TestCaptureReplay(t *testing.T) {
	for _, name := range []string{
		"rc_pingpong", "rc_pingpong_4k", "rc_pingpong_ipv6", "uc_pingpong", "ud_pingpong", "ud_pingpong_ipv6",
		"srq_pingpong", "send_bw", "send_bw_8k", "write_bw", "write_bw_8k", "write_bw_8k_ipv6", "read_bw", "read_bw_8k",
		"atomic_fa", "atomic_cs", "send_lat", "write_lat",
		"rc_pingpong_4k_mtu4096", "send_bw_8k_mtu4096", "write_bw_8k_mtu4096", "read_bw_8k_mtu4096",
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(capturesDir, name+".pcap")
			pkts, err := readRoCE(path)
			if errors.Is(err, os.ErrNotExist) {
				t.Skipf("capture %s not present", path)
			}
			if err != nil {
				t.Fatal(err)
			}
			conns := splitConns(pkts)
			for i, c := range conns {
				t.Run(fmt.Sprintf("qp%d", i), func(t *testing.T) { replay(t, c) })
			}
		})
	}
}

// splitConns separates the packets of several QP pairs (srq_pingpong runs
// two): a response's destination QP and the destination QP of the request
// it answers (same PSN) name the two ends of one connection.
func splitConns(pkts []capPkt) [][]capPkt {
	dests := [2]map[bth.QPN]bool{{}, {}}
	for _, p := range pkts {
		dests[p.from][bth.Header(p.b).DestQP()] = true
	}
	if len(dests[0]) <= 1 && len(dests[1]) <= 1 {
		return [][]capPkt{pkts}
	}
	reqDest := [2]map[bth.PSN]bth.QPN{{}, {}}
	for _, p := range pkts {
		h := bth.Header(p.b)
		if h.Opcode().Info().Has(bth.FlagReq) {
			reqDest[p.from][h.PSN()] = h.DestQP()
		}
	}
	peer := map[bth.QPN]bth.QPN{} // side-0 QPN -> side-1 QPN
	var order []bth.QPN
	for _, p := range pkts {
		h := bth.Header(p.b)
		if p.from == 1 && h.Opcode().Info().Has(bth.FlagResp) {
			if d1, ok := reqDest[0][h.PSN()]; ok {
				if _, seen := peer[h.DestQP()]; !seen {
					order = append(order, h.DestQP())
				}
				peer[h.DestQP()] = d1
			}
		}
	}
	var out [][]capPkt
	for _, q0 := range order {
		var c []capPkt
		for _, p := range pkts {
			d := bth.Header(p.b).DestQP()
			if (p.from == 1 && d == q0) || (p.from == 0 && d == peer[q0]) {
				c = append(c, p)
			}
		}
		out = append(out, c)
	}
	return out
}

func replay(t *testing.T, pkts []capPkt) {
	if len(pkts) == 0 {
		t.Fatal("no RoCE packets")
	}
	// QPNs: the destination QP of each side's packets is the other side's.
	var qpn [2]bth.QPN
	var have [2]bool
	var typ transport.QPType = transport.RC
	switch bth.Header(pkts[0].b).Opcode().Transport() {
	case bth.TransportUC:
		typ = transport.UC
	case bth.TransportUD:
		typ = transport.UD
	}
	var firstPSN [2]bth.PSN
	var haveReq [2]bool
	mtu := 0
	var qkey bth.QKey
	for _, p := range pkts {
		h := bth.Header(p.b)
		if !have[1-p.from] {
			qpn[1-p.from], have[1-p.from] = h.DestQP(), true
		}
		oi := h.Opcode().Info()
		if oi.Has(bth.FlagReq) && !haveReq[p.from] {
			firstPSN[p.from], haveReq[p.from] = h.PSN(), true
		}
		if oi.Any(bth.FlagFirst|bth.FlagMiddle) && !oi.Has(bth.FlagOnly) {
			mtu = max(mtu, len(p.b)-oi.HdrLen)
		}
		if oi.DETH != 0 {
			qkey = bth.DETH(p.b[oi.DETH:]).QKey()
			// UD: the source QPN is in the DETH.
			qpn[p.from], have[p.from] = bth.DETH(p.b[oi.DETH:]).SrcQP(), true
		}
	}
	if !have[0] || !have[1] {
		t.Skip("capture has traffic in one direction only")
	}
	m := bth.MTU1024
	if mtu != 0 {
		m = bth.MTUFromBytes(mtu)
	}
	mem := tt.NewMemory()
	var sides [2]*tt.Side
	for i := range sides {
		s, err := tt.NewSide(typ, qpn[i], uint32(i+1), mem, 256)
		if err != nil {
			t.Fatal(err)
		}
		sides[i] = s
	}
	if err := tt.Connect(0, sides[0].QP, sides[1].QP, tt.Conn{MTU: m, PSN: firstPSN, Timeout: 14, RetryCnt: 7, RNRRetry: 7,
		MinRNRTimer: 12, MaxRdAtomic: 16, Access: allAccess, QKey: qkey}); err != nil {
		t.Fatal(err)
	}
	msgs := [2][]capMsg{messages(pkts, 0, uint32(m.Bytes())), messages(pkts, 1, uint32(m.Bytes()))}
	prepareRemote(mem, pkts, uint32(m.Bytes()))
	// Post everything: receives with room for any message, then the sends
	// with their captured payload.
	for i, s := range sides {
		for k := 0; k < len(msgs[1-i]); k++ {
			buf := mem.Register(uint32(i+1), 1<<16+64, allAccess)
			s.RQ.Post(uint64(k), buf.SGE(0, 1<<16+64))
		}
		for _, cm := range msgs[i] {
			wr := cm.wr
			local := mem.Register(uint32(i+1), int(cm.length)+8, allAccess)
			copy(local.Buf, cm.payload)
			wr.SGL = []transport.SGE{local.SGE(0, int(cm.length))}
			if err := s.QP.PostSend(0, &wr); err != nil {
				t.Fatalf("side %d post %+v: %v", i, wr, err)
			}
		}
	}
	// Drive one packet at a time in each direction so that no ACK is
	// coalesced that rxe, answering packet by packet, sent separately.
	var got [2][][]byte
	buf := make([]byte, 8192)
	now := transport.Time(0)
	info := [2]transport.RxInfo{tt.GRHFor(0), tt.GRHFor(1)}
	for idle := 0; idle < 2; {
		idle++
		for i, s := range sides {
			n, _, ok := s.QP.Transmit(now, buf)
			if !ok {
				continue
			}
			idle = 0
			pkt := append([]byte(nil), buf[:n]...)
			got[i] = append(got[i], pkt)
			sides[1-i].QP.Receive(now, pkt, &info[i])
		}
		now += 1000
	}
	for from := 0; from < 2; from++ {
		for _, resp := range []bool{false, true} {
			want := stream(pkts, from, resp)
			var mine [][]byte
			for _, p := range got[from] {
				if bth.Header(p).Opcode().Info().Has(bth.FlagResp) == resp {
					mine = append(mine, p)
				}
			}
			what := fmt.Sprintf("side %d %s", from, map[bool]string{false: "requests", true: "responses"}[resp])
			if len(mine) != len(want) {
				t.Errorf("%s: %d packets, capture has %d", what, len(mine), len(want))
			}
			for k := 0; k < min(len(mine), len(want)); k++ {
				if !bytes.Equal(mine[k], want[k]) {
					t.Errorf("%s: packet %d differs\n got %x\nwant %x\n got %+v\nwant %+v", what, k,
						head(mine[k]), head(want[k]), bth.Header(mine[k]).Fields(), bth.Header(want[k]).Fields())
					break
				}
			}
		}
	}
	if t.Failed() {
		return
	}
	for i, s := range sides {
		for _, wc := range s.SendCQ.Take(nil) {
			if wc.Status != transport.StatusSuccess {
				t.Errorf("side %d: %+v", i, wc)
			}
		}
	}
	t.Logf("%v, MTU %v, %d packets matched byte for byte", typ, m, len(pkts))
}

func head(b []byte) []byte { return b[:min(len(b), 48)] }

func isAtomic(op transport.WROpcode) bool {
	return op == transport.WRAtomicCmpAndSwp || op == transport.WRAtomicFetchAndAdd
}

// TestCaptureResponderReplay feeds one engine exactly the packets the
// kernel requester put on the wire (retransmissions included) and checks
// that its responses equal the kernel responder's byte for byte: the
// responder's output depends only on its input, so this is exact even for
// send_bw_8k_loss, where netem dropped 10% of the requests (PSN sequence
// NAKs, one per gap, then silence until the expected PSN; ACKs after
// go-back-N).
func TestCaptureResponderReplay(t *testing.T) {
	for _, name := range []string{"send_bw_8k_loss", "send_bw_8k", "write_bw_8k", "read_bw_8k", "atomic_fa", "rc_pingpong_4k"} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(capturesDir, name+".pcap")
			pkts, err := readRoCE(path)
			if errors.Is(err, os.ErrNotExist) {
				t.Skipf("capture %s not present", path)
			}
			if err != nil {
				t.Fatal(err)
			}
			// Responder = side 1 (the server). Its QPN is the requests'
			// destination; it expects the first request PSN.
			var reqs [][]byte
			for _, p := range pkts {
				if p.from == 0 && bth.Header(p.b).Opcode().Info().Has(bth.FlagReq) {
					reqs = append(reqs, p.b)
				}
			}
			want := stream(pkts, 1, true)
			first := bth.Header(reqs[0])
			var peer bth.QPN
			for _, p := range pkts {
				if p.from == 1 {
					peer = bth.Header(p.b).DestQP()
					break
				}
			}
			mem := tt.NewMemory()
			b, err := tt.NewSide(transport.RC, first.DestQP(), 2, mem, 256)
			if err != nil {
				t.Fatal(err)
			}
			a, _ := tt.NewSide(transport.RC, peer, 1, mem, 256)
			if err := tt.Connect(0, a.QP, b.QP, tt.Conn{MTU: bth.MTU1024, PSN: [2]bth.PSN{first.PSN(), 0}, Timeout: 14,
				RetryCnt: 7, RNRRetry: 7, MinRNRTimer: 12, MaxRdAtomic: 16, Access: allAccess}); err != nil {
				t.Fatal(err)
			}
			// Memory for every R_Key the requests name, filled from the
			// capture's READ responses and atomic ACKs as in replay().
			prepareRemote(mem, pkts, 1024)
			for k := 0; k < 4096; k++ {
				buf := mem.Register(2, 8192, allAccess)
				if !b.RQ.Post(uint64(k), buf.SGE(0, 8192)) {
					break
				}
			}
			out := make([]byte, 8192)
			var got [][]byte
			info := tt.GRHFor(0)
			for _, r := range reqs {
				b.QP.Receive(0, r, &info)
				for {
					n, _, ok := b.QP.Transmit(0, out)
					if !ok {
						break
					}
					got = append(got, append([]byte(nil), out[:n]...))
				}
			}
			if len(got) != len(want) {
				t.Errorf("%d responses, capture has %d", len(got), len(want))
			}
			for k := 0; k < min(len(got), len(want)); k++ {
				if !bytes.Equal(got[k], want[k]) {
					t.Fatalf("response %d differs\n got %x %+v\nwant %x %+v", k, head(got[k]), bth.Header(got[k]).Fields(),
						head(want[k]), bth.Header(want[k]).Fields())
				}
			}
			t.Logf("%d requests in, %d responses identical (%+v)", len(reqs), len(got), *b.QP.Stats())
		})
	}
}

// prepareRemote registers, for each side, one MR per R_Key its peer's
// requests name (in PD side+1, at the captured VAs and keys), covering every
// RETH/AtomicETH range, filled from the capture's READ response payloads;
// atomic targets start from the first original value the capture shows.
func prepareRemote(mem *tt.Memory, pkts []capPkt, pmtu uint32) {
	msgs := [2][]capMsg{messages(pkts, 0, pmtu), messages(pkts, 1, pmtu)}
	type span struct{ lo, hi uint64 }
	spans := map[[2]uint64]*span{}
	for from := 0; from < 2; from++ {
		for _, cm := range msgs[from] {
			if cm.wr.RKey == 0 && cm.wr.RemoteAddr == 0 {
				continue
			}
			k := [2]uint64{uint64(1 - from), uint64(cm.wr.RKey)}
			s := spans[k]
			if s == nil {
				s = &span{lo: cm.wr.RemoteAddr, hi: cm.wr.RemoteAddr}
				spans[k] = s
			}
			s.lo = min(s.lo, cm.wr.RemoteAddr)
			s.hi = max(s.hi, cm.wr.RemoteAddr+uint64(cm.length))
		}
	}
	mrs := map[[2]uint64]*tt.MR{}
	for k, s := range spans {
		mrs[k] = mem.RegisterAt(uint32(k[0]+1), s.lo, bth.RKey(k[1]), int(s.hi-s.lo), allAccess)
	}
	for from := 0; from < 2; from++ {
		reqs := msgs[from]
		resps := stream(pkts, 1-from, true)
		ri := 0
		for _, cm := range reqs {
			mr := mrs[[2]uint64{uint64(1 - from), uint64(cm.wr.RKey)}]
			switch {
			case cm.wr.Opcode == transport.WRRDMARead:
				// Collect this READ's response payload.
				var data []byte
				for ri < len(resps) && len(data) < int(cm.length) {
					oi := bth.Header(resps[ri]).Opcode().Info()
					if oi.Has(bth.FlagRead) {
						data = append(data, resps[ri][oi.HdrLen:len(resps[ri])-bth.Header(resps[ri]).PadCnt()]...)
					}
					ri++
				}
				copy(mr.Buf[cm.wr.RemoteAddr-mr.Addr:], data)
			case isAtomic(cm.wr.Opcode):
				for ri < len(resps) && bth.Header(resps[ri]).Opcode() != bth.OpRCAtomicAcknowledge {
					ri++
				}
				if ri < len(resps) {
					orig := bth.AtomicAckETH(resps[ri][bth.OpRCAtomicAcknowledge.Info().AtomicAckETH:]).OrigData()
					off := cm.wr.RemoteAddr - mr.Addr
					if binary.NativeEndian.Uint64(mr.Buf[off:]) == 0 {
						binary.NativeEndian.PutUint64(mr.Buf[off:], orig)
					}
					ri++
				}
			}
		}
	}
}

// TestCaptureRequesterReplay posts the kernel client's work requests to
// our requester and plays the kernel server's responses to it at the points
// where the capture has them: wherever the capture shows a client packet,
// our requester must emit exactly that packet next. (send_bw_8k_loss is
// covered by TestCaptureResponderReplay only: rxe's requester keeps sending
// new packets for a while after a NAK arrives, a timing effect this
// lock-step replay cannot reproduce.)
func TestCaptureRequesterReplay(t *testing.T) {
	for _, name := range []string{"send_bw", "send_bw_8k", "write_bw_8k", "read_bw", "read_bw_8k", "atomic_cs",
		"atomic_fa", "send_bw_8k_mtu4096"} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(capturesDir, name+".pcap")
			pkts, err := readRoCE(path)
			if errors.Is(err, os.ErrNotExist) {
				t.Skipf("capture %s not present", path)
			}
			if err != nil {
				t.Fatal(err)
			}
			mtu := bth.MTU1024
			if strings.HasSuffix(name, "mtu4096") {
				mtu = bth.MTU4096
			}
			var qpn [2]bth.QPN
			var psn bth.PSN
			for _, p := range pkts {
				qpn[1-p.from] = bth.Header(p.b).DestQP()
			}
			for _, p := range pkts {
				if p.from == 0 {
					psn = bth.Header(p.b).PSN()
					break
				}
			}
			mem := tt.NewMemory()
			a, _ := tt.NewSide(transport.RC, qpn[0], 1, mem, 256)
			b, _ := tt.NewSide(transport.RC, qpn[1], 2, mem, 256)
			// perftest asks for the device maximum of outstanding READs and
			// atomics (rxe: 128); the captures show 17 in flight.
			if err := tt.Connect(0, a.QP, b.QP, tt.Conn{MTU: mtu, PSN: [2]bth.PSN{psn, 0}, Timeout: 14,
				RetryCnt: 7, RNRRetry: 7, MinRNRTimer: 12, MaxRdAtomic: 128, Access: allAccess}); err != nil {
				t.Fatal(err)
			}
			for _, cm := range messages(pkts, 0, uint32(mtu.Bytes())) {
				wr := cm.wr
				local := mem.Register(1, int(cm.length)+8, allAccess)
				copy(local.Buf, cm.payload)
				wr.SGL = []transport.SGE{local.SGE(0, int(cm.length))}
				if err := a.QP.PostSend(0, &wr); err != nil {
					t.Fatal(err)
				}
			}
			out := make([]byte, 8192)
			info := tt.GRHFor(1)
			matched := 0
			for i, p := range pkts {
				if p.from == 1 {
					a.QP.Receive(0, p.b, &info)
					continue
				}
				n, _, ok := a.QP.Transmit(0, out)
				if !ok {
					t.Fatalf("capture packet %d (%+v): our requester has nothing to send", i, bth.Header(p.b).Fields())
				}
				if !bytes.Equal(out[:n], p.b) {
					t.Fatalf("capture packet %d differs\n got %x %+v\nwant %x %+v", i, head(out[:n]), bth.Header(out[:n]).Fields(),
						head(p.b), bth.Header(p.b).Fields())
				}
				matched++
			}
			if n, _, ok := a.QP.Transmit(0, out); ok {
				t.Fatalf("requester sends more than the capture: %+v", bth.Header(out[:n]).Fields())
			}
			for _, wc := range a.SendCQ.Take(nil) {
				if wc.Status != transport.StatusSuccess {
					t.Fatalf("completion %+v", wc)
				}
			}
			t.Logf("%d client packets identical in sequence; A %+v", matched, *a.QP.Stats())
		})
	}
}
