package hca_test

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/hca"
	"github.com/goroce/goroce/hca/link"
	"github.com/goroce/goroce/hca/link/memlink"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/wire"
)

// The hostile peer of FuzzDeviceFrames sits at addrA and claims these QPNs
// and PSNs; the target's RC, UC and SRQ-attached RC QPs are connected to
// them.
const (
	fzPeerRC, fzPeerUC, fzPeerSRQ, fzPeerUD bth.QPN = 0x000100, 0x000101, 0x000102, 0x000103

	fzPSNRC, fzPSNUC, fzPSNSRQ bth.PSN = 0x10, 0x30, 0x40 // what the target expects next
	fzSQPSN                    bth.PSN = 0x500            // the target's own requests

	fzQKey       = 0x11111111
	fzPeerVA     = 0x7000_0000
	fzPeerRKey   = 0x1234
	fzMTU        = bth.MTU1024
	fzMTUBytes   = 1024
	fzPage       = 4096
	fzMemPages   = 8
	fzMR1, fzMR2 = 1 * fzPage, 4 * fzPage // offsets in the backing memory
	fzMR3        = 6 * fzPage

	// MR1's layout: receive buffers in [0, 5072), then the local targets
	// of the device's READ and FETCH_ADD, then what the seeds write.
	fzReadAt   = 5120 // 1500 bytes
	fzFetchAt  = 6656
	fzWriteAt  = 6700 // to 8032
	fzAtomicAt = 8040
)

var fzStranger = netip.MustParseAddr("192.0.2.9")

// fzFraming is how the frames of a fuzz device travel: RoCEv2 over IPv4 on
// an IP link (the udp and tun links), or on an Ethernet link (afpacket,
// tap) RoCEv2 over IPv4 or RoCEv1 (Ethernet and GRH).
type fzFraming uint8

const (
	fzIP fzFraming = iota
	fzEthV2
	fzEthV1
)

func (f fzFraming) String() string { return [...]string{"IP", "Ethernet-RoCEv2", "Ethernet-RoCEv1"}[f] }

var (
	fzMACA = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x01} // memlink's defaults
	fzMACB = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x02}
)

// fzResolver gives the peer's MAC (Options.Resolver of an Ethernet device).
type fzResolver struct{}

func (fzResolver) Resolve(dst netip.Addr) (net.HardwareAddr, error) { return fzMACA, nil }

var fzMemory [fzMemPages * fzPage]byte

// fuzzDevice is a live device at addrB with every kind of receiver a frame
// can reach, fed by a raw memlink endpoint at addrA.
//
// Its memory is one backing array: MR1 (2 pages, every access, PD 1) is the
// only part a peer may change (receive buffers and the local targets of the
// device's own READ and atomic lie in it too). MR2 (remote read only, PD 1),
// MR3 (every access, but PD 2, which owns no QP) and the guard pages around
// them must never change.
type fuzzDevice struct {
	framing        fzFraming
	dev            *hca.Device
	raw            *memlink.Endpoint
	mem            []byte
	mr1, mr2, mr3  *hca.MR
	rc, uc, ud, rs *hca.QP
	cq             *hca.CQ
}

func newFuzzDevice(t testing.TB, fr fzFraming) *fuzzDevice {
	t.Helper()
	return newFuzzDeviceTimeout(t, fr, fzTimeout)
}

// fzTimeout is the local ACK timeout code of the fuzz device's RC QPs: 6
// (262 µs), so that its own requests time out and are resent while a fuzz
// input's frames arrive, and its retries last ~2 ms, longer than the
// input.
const fzTimeout = 6

// newFuzzDeviceTimeout is newFuzzDevice with the RC QPs' local ACK timeout
// code. A check of the seeds' effects takes a long one: after a timeout
// the requester resends one packet at a time until one is acknowledged
// (transport's probe), so on a loaded machine the SEND could time out
// before the READ and the FETCH_ADD are first sent, and the seeds' answers
// to them would then answer nothing.
func newFuzzDeviceTimeout(t testing.TB, fr fzFraming, timeout uint8) *fuzzDevice {
	t.Helper()
	cfg := memlink.Config{AddrsA: []netip.Addr{addrA}, AddrsB: []netip.Addr{addrB}, QueueLen: 4096}
	opts := hca.Options{Name: "gfuzz", Shards: 1}
	if fr != fzIP {
		cfg.Format = link.FormatEthernet
		opts.RoCEv1, opts.Resolver = fr == fzEthV1, fzResolver{}
	}
	raw, b, err := memlink.Pair(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dev, err := hca.Open(b, opts)
	if err != nil {
		t.Fatal(err)
	}
	// The same memory every time, so that the MRs' addresses in the
	// seeds stay right from one device to the next (fuzz inputs run one at
	// a time in a process).
	fd := &fuzzDevice{framing: fr, dev: dev, raw: raw, mem: fzMemory[:]}
	for i := range fd.mem {
		fd.mem[i] = byte(i*13 + 5)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			dev.Close()
			t.Fatal(err)
		}
	}
	pd1, err := dev.AllocPD()
	must(err)
	pd2, err := dev.AllocPD()
	must(err)
	fd.mr1, err = pd1.RegMR(fd.mem[fzMR1:fzMR1+2*fzPage], allAccess)
	must(err)
	fd.mr2, err = pd1.RegMR(fd.mem[fzMR2:fzMR2+fzPage], hca.AccessRemoteRead)
	must(err)
	fd.mr3, err = pd2.RegMR(fd.mem[fzMR3:fzMR3+fzPage], allAccess)
	must(err)
	fd.cq, err = dev.CreateCQ(4096)
	must(err)
	srq, err := pd1.CreateSRQ(hca.SRQAttr{MaxWR: 16, MaxSGE: 2})
	must(err)
	qcap := hca.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInlineData: 64}
	mk := func(typ hca.QPType, s *hca.SRQ) *hca.QP {
		q, err := pd1.CreateQP(hca.QPInitAttr{Type: typ, SendCQ: fd.cq, RecvCQ: fd.cq, SRQ: s, Cap: qcap})
		must(err)
		return q
	}
	fd.rc, fd.uc, fd.ud, fd.rs = mk(hca.RC, nil), mk(hca.UC, nil), mk(hca.UD, nil), mk(hca.RC, srq)
	// The GID of addrB: the table's only entry on an IP link, after the
	// link-local one on an Ethernet link.
	sgid := -1
	for _, g := range dev.GIDs() {
		if g.GID == hca.GID(wire.GIDFromAddr(addrB)) {
			sgid = g.Index
		}
	}
	if sgid < 0 {
		dev.Close()
		t.Fatalf("no GID for %v in %v", addrB, dev.GIDs())
	}
	must(fzConnect(fd.rc, sgid, fzPeerRC, fzPSNRC, timeout))
	must(fzConnect(fd.uc, sgid, fzPeerUC, fzPSNUC, timeout))
	must(fzConnect(fd.ud, sgid, 0, 0, timeout))
	must(fzConnect(fd.rs, sgid, fzPeerSRQ, fzPSNSRQ, timeout))
	// Receives: 4 per QP and the SRQ, each scattering 2000 bytes into two
	// pieces of MR1's first 5072 bytes (the layout of MR1 is at fzSeeds).
	for i := 0; i < 4; i++ {
		wr := func(id int) *hca.RecvWR {
			off := (id % 4) * 1024
			return &hca.RecvWR{ID: uint64(id), SGL: []hca.SGE{fd.mr1.SGE(off, 600), fd.mr1.SGE(off+600, 1400)}}
		}
		for k, q := range []*hca.QP{fd.rc, fd.uc, fd.ud} {
			must(q.PostRecv(wr(k*4 + i)))
		}
		must(srq.PostRecv(wr(12 + i)))
	}
	// The device's own requests, so that responses reach its completer: a
	// SEND, a READ and a FETCH_ADD landing in MR1.
	for _, wr := range []hca.SendWR{
		{ID: 100, Opcode: transport.WRSend, Flags: transport.SendSignaled, SGL: []hca.SGE{fd.mr1.SGE(0, 64)}},
		{ID: 101, Opcode: transport.WRRDMARead, Flags: transport.SendSignaled, SGL: []hca.SGE{fd.mr1.SGE(fzReadAt, 1500)},
			RemoteAddr: fzPeerVA, RKey: fzPeerRKey},
		{ID: 102, Opcode: transport.WRAtomicFetchAndAdd, Flags: transport.SendSignaled, SGL: []hca.SGE{fd.mr1.SGE(fzFetchAt, 8)},
			RemoteAddr: fzPeerVA, RKey: fzPeerRKey, CompareAdd: 3},
	} {
		must(fd.rc.PostSend(&wr))
	}
	// A peer answers requests it has received: responses fed before the
	// requester has sent those PSNs (a loaded machine runs the device's
	// goroutines late) would be dropped as answering nothing. Wait until
	// three packets are out: with a long timeout (newFuzzDeviceTimeout)
	// the SEND, the READ and the FETCH_ADD.
	for deadline := time.Now().Add(10 * time.Second); fd.rc.Stats().TxPackets < 3; time.Sleep(50 * time.Microsecond) {
		if time.Now().After(deadline) {
			dev.Close()
			t.Fatalf("the device sent %d of its 3 requests in 10 s", fd.rc.Stats().TxPackets)
		}
	}
	return fd
}

// close closes the device, which waits for its goroutines, and the raw end.
func (fd *fuzzDevice) close() {
	fd.dev.Close()
	fd.raw.Close()
}

// fzConnect takes q to RTS towards the hostile peer.
func fzConnect(q *hca.QP, sgid int, dest bth.QPN, rqPSN bth.PSN, timeout uint8) error {
	init := hca.QPAttr{Port: 1}
	init.State = hca.StateInit
	mask := transport.AttrState | transport.AttrPKeyIndex | transport.AttrPort
	if q.Type() == hca.UD {
		init.QKey = fzQKey
		mask |= transport.AttrQKey
	} else {
		init.AccessFlags = hca.AccessRemoteWrite | hca.AccessRemoteRead | hca.AccessRemoteAtomic
		mask |= transport.AttrAccessFlags
	}
	if err := q.Modify(&init, mask); err != nil {
		return err
	}
	rtr := hca.QPAttr{AH: hca.AHAttr{DGID: hca.GID(wire.GIDFromAddr(addrA)), SGIDIndex: sgid, HopLimit: 64}}
	rtr.State = hca.StateRTR
	mask = transport.AttrState
	if q.Type() != hca.UD {
		rtr.PathMTU, rtr.DestQPN, rtr.RQPSN = fzMTU, dest, rqPSN
		mask |= transport.AttrAV | transport.AttrPathMTU | transport.AttrDestQPN | transport.AttrRQPSN
		if q.Type() == hca.RC {
			rtr.MaxDestRdAtomic, rtr.MinRNRTimer = 4, 1
			mask |= transport.AttrMaxDestRdAtomic | transport.AttrMinRNRTimer
		}
	}
	if err := q.Modify(&rtr, mask); err != nil {
		return err
	}
	rts := hca.QPAttr{}
	rts.State, rts.SQPSN = hca.StateRTS, fzSQPSN
	mask = transport.AttrState | transport.AttrSQPSN
	if q.Type() == hca.RC {
		rts.Timeout, rts.RetryCnt, rts.RNRRetry, rts.MaxRdAtomic = timeout, 7, 7, 4
		mask |= transport.AttrTimeout | transport.AttrRetryCnt | transport.AttrRNRRetry | transport.AttrMaxQPRdAtomic
	}
	return q.Modify(&rts, mask)
}

// Record control bits of a fuzz input.
const (
	fzFromStranger = 1 << iota // the IPv4 source is fzStranger, not the peer
	fzBadICRC                  // the ICRC is computed, then one bit flipped
	fzRawFrame                 // the bytes are the whole frame, sent as they are
	fzVLAN                     // on an Ethernet link, an 802.1Q tag
)

// fzRecord is one frame of a fuzz input: a control byte, a big-endian
// length, and that many bytes (BTH to pad, or a whole IP packet).
func fzRecord(ctl byte, b []byte) []byte {
	out := []byte{ctl, byte(len(b) >> 8), byte(len(b))}
	return append(out, b...)
}

// frame builds the frame a record stands for, in buf.
func (fd *fuzzDevice) frame(buf []byte, ctl byte, tr []byte) []byte {
	if ctl&fzRawFrame != 0 || len(tr) < bth.HeaderLen {
		return append(buf[:0], tr...)
	}
	src := addrA
	if ctl&fzFromStranger != 0 {
		src = fzStranger
	}
	off := wire.MaxHeadroom
	if len(buf) < off+len(tr)+wire.Tailroom {
		return nil
	}
	copy(buf[off:], tr)
	a := wire.Addr{Kind: wire.KindRoCEv2IPv4, SrcIP: src, DstIP: addrB, HopLimit: 64, DontFragment: true,
		SrcPort: wire.UDPSourcePort(fzPeerRC, bth.Header(tr).DestQP()),
		SGID:    wire.GIDFromAddr(src), DGID: wire.GIDFromAddr(addrB),
		SrcMAC: [6]byte(fzMACA), DstMAC: [6]byte(fzMACB), VLAN: ctl&fzVLAN != 0, VLANTCI: 5}
	if fd.framing == fzEthV1 {
		a.Kind = wire.KindRoCEv1
	}
	f, err := wire.Finish(buf, off, len(tr), fd.framing.wire(), &a)
	if err != nil {
		return nil
	}
	if ctl&fzBadICRC != 0 {
		f[len(f)-1] ^= 0x10
	}
	return f
}

// wire is the framing the device's link hands it.
func (f fzFraming) wire() wire.Framing {
	if f == fzIP {
		return wire.FramingIP
	}
	return wire.FramingEthernet
}

// feed sends every record of data to the device and returns once its
// reader has taken all of them (or the link dropped them).
func (fd *fuzzDevice) feed(t testing.TB, data []byte) {
	t.Helper()
	buf := make([]byte, 2*fzPage)
	for len(data) >= 3 {
		ctl := data[0]
		n := min(int(binary.BigEndian.Uint16(data[1:])), len(data)-3)
		tr := data[3 : 3+n]
		data = data[3+n:]
		if f := fd.frame(buf, ctl, tr); len(f) > 0 {
			fd.raw.Write([][]byte{f}, 0) // a frame over the MTU is refused: nothing sent
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		s := fd.raw.Stats()
		if s.Delivered+s.Dropped >= s.Sent {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the device took %d of %d frames in 10 s", s.Delivered+s.Dropped, s.Sent)
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// FuzzDeviceFrames sends arbitrary frames with valid ICRCs (or, as the
// input asks, a bad ICRC, a stranger's source address, or arbitrary bytes
// as the whole IP packet) to a live device: RC, UC and UD QPs, an RC QP on
// an SRQ, memory regions in two PDs, and the device's own requests in
// flight. The device must not panic or stall, and no byte of memory
// outside the one region a peer may write (right key, range, access and
// PD) may change.
func FuzzDeviceFrames(f *testing.F) {
	for _, s := range fzSeedInputs(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) { fzRun(t, fzIP, data) })
}

// FuzzDeviceFramesEthernet is FuzzDeviceFrames on an Ethernet link:
// RoCEv2 over IPv4, or RoCEv1 (v1), and 802.1Q tags as the input asks.
func FuzzDeviceFramesEthernet(f *testing.F) {
	in := fzSeedInputs(f)
	for _, s := range in {
		f.Add(false, s)
		f.Add(true, s)
	}
	vlan := bytes.Clone(in[len(in)-4]) // fzSeeds' SEND with a bad ICRC, now good and tagged
	vlan[0] = fzVLAN
	f.Add(false, vlan)
	f.Add(true, vlan)
	f.Fuzz(func(t *testing.T, v1 bool, data []byte) {
		fr := fzEthV2
		if v1 {
			fr = fzEthV1
		}
		fzRun(t, fr, data)
	})
}

// fzSeedInputs are the seed inputs: each of fzSeeds, and all of them in
// one input.
func fzSeedInputs(f *testing.F) [][]byte {
	fd := newFuzzDevice(f, fzIP)
	seeds := fzSeeds(fd)
	fd.close()
	var all []byte
	for _, s := range seeds {
		all = append(all, s...)
	}
	return append(seeds, all)
}

// fzRun is one fuzz input against a fresh device.
func fzRun(t *testing.T, fr fzFraming, data []byte) {
	fd := newFuzzDevice(t, fr)
	before := bytes.Clone(fd.mem)
	fd.feed(t, data)
	// Let timers run: the device's own requests time out and retry, and
	// RNR waits end, with the frames' effects in place.
	time.Sleep(time.Millisecond)
	fd.close() // waits for every goroutine of the device
	mr1 := fd.mem[fzMR1 : fzMR1+2*fzPage]
	copy(before[fzMR1:], mr1) // the only part a peer may change
	if i := firstDiff(before, fd.mem); i >= 0 {
		t.Fatalf("byte %d of the device's memory changed (%s): %#x -> %#x", i, fzRegion(i), before[i], fd.mem[i])
	}
}

func firstDiff(a, b []byte) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}

func fzRegion(i int) string {
	switch {
	case i >= fzMR2 && i < fzMR2+fzPage:
		return "MR2, remote read only"
	case i >= fzMR3 && i < fzMR3+fzPage:
		return "MR3, another PD"
	}
	return "a guard page outside every MR"
}

// fzSeeds are well-formed frames for fd's QPs and memory: every request
// opcode, allowed and refused, and responses to the device's own requests.
func fzSeeds(fd *fuzzDevice) [][]byte {
	type ext func(t []byte, oi *bth.OpInfo)
	pkt := func(op bth.Opcode, dest bth.QPN, psn bth.PSN, payload int, ackReq bool, fill ext) []byte {
		oi := op.Info()
		pad := -payload & 3
		t := make([]byte, oi.HdrLen+payload+pad)
		bth.Header(t).Encode(&bth.Fields{Opcode: op, PadCnt: pad, PKey: bth.DefaultPKey, DestQP: dest,
			AckReq: ackReq, PSN: psn})
		for i := oi.HdrLen; i < oi.HdrLen+payload; i++ {
			t[i] = byte(i)
		}
		if fill != nil {
			fill(t, oi)
		}
		return t
	}
	reth := func(va uint64, k bth.RKey, n uint32) ext {
		return func(t []byte, oi *bth.OpInfo) {
			r := bth.RETH(t[oi.RETH:])
			r.SetVA(va)
			r.SetRKey(k)
			r.SetDMALen(n)
		}
	}
	atomic := func(va uint64, k bth.RKey) ext {
		return func(t []byte, oi *bth.OpInfo) {
			a := bth.AtomicETH(t[oi.AtomicETH:])
			a.SetVA(va)
			a.SetRKey(k)
			a.SetSwapAdd(7)
			a.SetCompare(0)
		}
	}
	aeth := func(s bth.Syndrome, msn uint32) ext {
		return func(t []byte, oi *bth.OpInfo) {
			a := bth.AETH(t[oi.AETH:])
			a.SetSyndrome(s)
			a.SetMSN(msn)
		}
	}
	rc, uc, ud, rs := fd.rc.QPN(), fd.uc.QPN(), fd.ud.QPN(), fd.rs.QPN()
	mr1, mr2, mr3 := fd.mr1, fd.mr2, fd.mr3
	va1, va2, va3 := mr1.Addr(), mr2.Addr(), mr3.Addr()
	// One conversation on the RC QP, in PSN order.
	p := fzPSNRC
	next := func() bth.PSN { q := p; p = p.Add(1); return q }
	conv := [][]byte{
		pkt(bth.OpRCSendOnly, rc, next(), 100, true, nil),
		pkt(bth.OpRCSendFirst, rc, next(), fzMTUBytes, false, nil),
		pkt(bth.OpRCSendLast, rc, next(), 10, true, nil),
		pkt(bth.OpRCRDMAWriteOnly, rc, next(), 64, true, reth(va1+fzWriteAt, mr1.RKey(), 64)),
		pkt(bth.OpRCRDMAWriteFirst, rc, next(), fzMTUBytes, false, reth(va1+fzWriteAt+100, mr1.RKey(), fzMTUBytes+20)),
		pkt(bth.OpRCRDMAWriteLast, rc, next(), 20, true, nil),
		pkt(bth.OpRCRDMAWriteOnlyWithImmediate, rc, next(), 16, true, func(t []byte, oi *bth.OpInfo) {
			reth(va1+fzWriteAt+1200, mr1.RKey(), 16)(t, oi)
			bth.ImmDt(t[oi.ImmDt:]).SetImm(0xabcd)
		}),
		pkt(bth.OpRCRDMAReadRequest, rc, next(), 0, true, reth(va2, mr2.RKey(), 3000)),
	}
	p = p.Add(2) // a 3000-byte READ takes 3 PSNs
	conv = append(conv,
		pkt(bth.OpRCCompareSwap, rc, next(), 0, true, atomic(va1+fzAtomicAt, mr1.RKey())),
		pkt(bth.OpRCFetchAdd, rc, next(), 0, true, atomic(va1+fzAtomicAt+8, mr1.RKey())),
		// Responses to the device's own SEND, READ and FETCH_ADD.
		pkt(bth.OpRCAcknowledge, rc, fzSQPSN, 0, false, aeth(bth.SyndromeACKUnlimited, 1)),
		pkt(bth.OpRCRDMAReadResponseFirst, rc, fzSQPSN.Add(1), fzMTUBytes, false, aeth(bth.SyndromeACKUnlimited, 1)),
		pkt(bth.OpRCRDMAReadResponseLast, rc, fzSQPSN.Add(2), 1500-fzMTUBytes, false, aeth(bth.SyndromeACKUnlimited, 2)),
		pkt(bth.OpRCAtomicAcknowledge, rc, fzSQPSN.Add(3), 0, false, func(t []byte, oi *bth.OpInfo) {
			aeth(bth.SyndromeACKUnlimited, 3)(t, oi)
			bth.AtomicAckETH(t[oi.AtomicAckETH:]).SetOrigData(41)
		}),
	)
	var seeds [][]byte
	var whole []byte
	for _, c := range conv {
		whole = append(whole, fzRecord(0, c)...)
	}
	seeds = append(seeds, whole)
	// Refusals, each the first request the RC QP sees: writes to the read-only
	// MR and to the other PD's MR, beyond MR1's end, an atomic on the other
	// PD's MR, a READ of MR1 with a bad key, invalidations of the other PD's
	// MR and of MR2 (no registered region may be invalidated by a peer); then
	// responses out of turn: a sequence NAK, an RNR NAK, a remote access NAK,
	// an ACK beyond what was sent.
	for _, c := range [][]byte{
		pkt(bth.OpRCRDMAWriteOnly, rc, fzPSNRC, 64, true, reth(va2, mr2.RKey(), 64)),
		pkt(bth.OpRCRDMAWriteOnly, rc, fzPSNRC, 64, true, reth(va3, mr3.RKey(), 64)),
		pkt(bth.OpRCRDMAWriteOnly, rc, fzPSNRC, 64, true, reth(va1+uint64(mr1.Len())-32, mr1.RKey(), 64)),
		pkt(bth.OpRCFetchAdd, rc, fzPSNRC, 0, true, atomic(va3, mr3.RKey())),
		pkt(bth.OpRCRDMAReadRequest, rc, fzPSNRC, 0, true, reth(va1, mr1.RKey()^0x80, 64)),
		pkt(bth.OpRCSendOnlyWithInvalidate, rc, fzPSNRC, 8, true, func(t []byte, oi *bth.OpInfo) {
			bth.IETH(t[oi.IETH:]).SetRKey(mr3.RKey())
		}),
		pkt(bth.OpRCSendOnlyWithInvalidate, rc, fzPSNRC, 8, true, func(t []byte, oi *bth.OpInfo) {
			bth.IETH(t[oi.IETH:]).SetRKey(mr2.RKey())
		}),
		pkt(bth.OpRCAcknowledge, rc, fzSQPSN, 0, false, aeth(bth.NAKSyndrome(bth.NAKPSNSequenceError), 0)),
		pkt(bth.OpRCAcknowledge, rc, fzSQPSN, 0, false, aeth(bth.RNRNAKSyndrome(1), 0)),
		pkt(bth.OpRCAcknowledge, rc, fzSQPSN, 0, false, aeth(bth.NAKSyndrome(bth.NAKRemoteAccessError), 0)),
		pkt(bth.OpRCAcknowledge, rc, fzSQPSN.Add(100), 0, false, aeth(bth.SyndromeACKUnlimited, 9)),
	} {
		seeds = append(seeds, fzRecord(0, c))
	}
	// UC, UD and the SRQ's RC QP.
	seeds = append(seeds,
		append(fzRecord(0, pkt(bth.OpUCSendOnly, uc, fzPSNUC, 200, false, nil)),
			fzRecord(0, pkt(bth.OpUCRDMAWriteOnly, uc, fzPSNUC.Add(1), 32, false, reth(va1+fzWriteAt+1300, mr1.RKey(), 32)))...),
		fzRecord(0, pkt(bth.OpUDSendOnly, ud, 7, 256, false, func(t []byte, oi *bth.OpInfo) {
			d := bth.DETH(t[oi.DETH:])
			d.SetQKey(fzQKey)
			d.SetSrcQP(fzPeerUD)
		})),
		fzRecord(0, pkt(bth.OpRCSendOnly, rs, fzPSNSRQ, 300, true, nil)),
	)
	// The same SEND with a bad ICRC, from a stranger, and as bytes that
	// are no IP packet.
	send := pkt(bth.OpRCSendOnly, rc, fzPSNRC, 100, true, nil)
	seeds = append(seeds, fzRecord(fzBadICRC, send), fzRecord(fzFromStranger, send), fzRecord(fzRawFrame, send))
	return seeds
}

// TestFuzzDeviceSeeds checks that FuzzDeviceFrames's frames reach what they
// aim at, so that the fuzzer explores the device and not its front door:
// the conversation's SENDs and WRITE land in MR1 and complete, the
// device's own requests complete from the forged responses, each refusal
// draws the NAK it must, and the bad ICRC, the stranger and the raw bytes
// are counted as such.
func TestFuzzDeviceSeeds(t *testing.T) {
	for _, fr := range []fzFraming{fzIP, fzEthV2, fzEthV1} {
		t.Run(fr.String(), func(t *testing.T) { fzCheckSeeds(t, fr) })
	}
}

func fzCheckSeeds(t *testing.T, fr fzFraming) {
	probe := newFuzzDevice(t, fr)
	seeds := fzSeeds(probe)
	probe.close()

	t.Run("conversation", func(t *testing.T) {
		fd := newFuzzDeviceTimeout(t, fr, 18) // ~1 s

		defer fd.close()
		fd.feed(t, seeds[0])
		want := map[uint64]transport.Status{0: transport.StatusSuccess, 1: transport.StatusSuccess,
			2:   transport.StatusSuccess, // two SENDs, WRITE_WITH_IMM
			100: transport.StatusSuccess, 101: transport.StatusSuccess, 102: transport.StatusSuccess}
		got := fzCompletions(t, fd.cq, len(want))
		for id, st := range want {
			if g, ok := got[id]; !ok || g != st {
				t.Errorf("WR %d: status %v (completed: %v), want %v (all: %v)", id, g, ok, st, got)
			}
		}
		mr1 := fd.mr1.Bytes()
		oi := bth.OpRCRDMAWriteOnly.Info()
		for i := 0; i < 64; i++ {
			if mr1[fzWriteAt+i] != byte(oi.HdrLen+i) {
				t.Fatalf("WRITE_ONLY byte %d = %#x, want %#x", i, mr1[fzWriteAt+i], byte(oi.HdrLen+i))
			}
		}
		if v := binary.NativeEndian.Uint64(mr1[fzFetchAt:]); v != 41 {
			t.Fatalf("the FETCH_ADD's original value is %d, want the ATOMIC ACKNOWLEDGE's 41", v)
		}
	})
	t.Run("refusals", func(t *testing.T) {
		// Seeds 1..7: each a request the RC responder must refuse with a
		// NAK; the fuzz target's memory check holds for all of them.
		wantNAK := []bth.NAKCode{bth.NAKRemoteAccessError, bth.NAKRemoteAccessError, bth.NAKRemoteAccessError,
			bth.NAKRemoteAccessError, bth.NAKRemoteAccessError, bth.NAKInvalidRequest, bth.NAKInvalidRequest}
		for i, code := range wantNAK {
			fd := newFuzzDevice(t, fr)
			before := bytes.Clone(fd.mem)
			fd.feed(t, seeds[1+i])
			syn, ok := fzAnswer(t, fd.raw, fr.wire())
			fd.close()
			if !ok || syn.Type() != bth.AckTypeNAK || syn.NAKCode() != code {
				t.Errorf("seed %d: answer %v (%v), want NAK %v", 1+i, syn, ok, code)
			}
			copy(before[fzMR1:], fd.mem[fzMR1:fzMR1+2*fzPage])
			if j := firstDiff(before, fd.mem); j >= 0 {
				t.Errorf("seed %d: byte %d changed (%s)", 1+i, j, fzRegion(j))
			}
		}
	})
	if fr != fzIP {
		t.Run("802.1Q", func(t *testing.T) {
			// The bad-ICRC seed's SEND, with a good ICRC and a VLAN tag.
			rec := bytes.Clone(seeds[len(seeds)-3])
			rec[0] = fzVLAN
			fd := newFuzzDevice(t, fr)
			defer fd.close()
			fd.feed(t, rec)
			if got := fzCompletions(t, fd.cq, 1); len(got) != 1 || got[0] != transport.StatusSuccess {
				t.Fatalf("tagged SEND: %v, want WR 0 received", got)
			}
		})
	}
	t.Run("front door", func(t *testing.T) {
		n := len(seeds)
		for i, c := range []struct {
			name  string
			count func(*hca.Counters) uint64
		}{
			{"bad ICRC", func(c *hca.Counters) uint64 { return c.RxICRCErrors.Load() }},
			{"stranger", func(c *hca.Counters) uint64 { return c.RxWrongAddress.Load() }},
			{"raw bytes", func(c *hca.Counters) uint64 { return c.RxMalformed.Load() + c.RxNotRoCE.Load() }},
		} {
			fd := newFuzzDevice(t, fr)
			fd.feed(t, seeds[n-3+i])
			fd.close()
			if got := c.count(&fd.dev.Counters); got != 1 {
				t.Errorf("%s: counted %d, want 1", c.name, got)
			}
		}
	})
}

// fzCompletions polls cq until it has n completions (or 5 s pass) and
// returns their statuses by WR ID.
func fzCompletions(t *testing.T, cq *hca.CQ, n int) map[uint64]transport.Status {
	t.Helper()
	got := map[uint64]transport.Status{}
	wcs := make([]hca.WC, 16)
	for deadline := time.Now().Add(5 * time.Second); len(got) < n && time.Now().Before(deadline); {
		k, err := cq.Poll(wcs)
		if err != nil {
			t.Fatal(err)
		}
		for _, wc := range wcs[:k] {
			got[wc.WRID] = wc.Status
		}
		if k == 0 {
			time.Sleep(100 * time.Microsecond)
		}
	}
	return got
}

// fzAnswer reads what the device sent to its peer (frames of framing)
// until it finds the RC responder's answer to the request at fzPSNRC, an
// ACK or a NAK, and returns its syndrome.
func fzAnswer(t *testing.T, raw *memlink.Endpoint, framing wire.Framing) (bth.Syndrome, bool) {
	t.Helper()
	bufs := [][]byte{make([]byte, 2*fzPage)}
	sizes := []int{0}
	done := make(chan struct{})
	defer close(done)
	type res struct {
		s  bth.Syndrome
		ok bool
	}
	out := make(chan res, 1)
	go func() {
		for {
			n, err := raw.Read(bufs, sizes, 0)
			if err != nil {
				out <- res{}
				return
			}
			if n == 0 {
				continue
			}
			var p wire.Packet
			if err := p.Decode(bufs[0][:sizes[0]], framing); err != nil {
				continue
			}
			tr := p.Transport()
			h := bth.Header(tr)
			if h.Opcode() == bth.OpRCAcknowledge && h.PSN() == fzPSNRC {
				out <- res{bth.AETH(tr[bth.HeaderLen:]).Syndrome(), true}
				return
			}
			select {
			case <-done:
				return
			default:
			}
		}
	}()
	select {
	case r := <-out:
		return r.s, r.ok
	case <-time.After(5 * time.Second):
		return 0, false
	}
}
