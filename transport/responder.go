package transport

import (
	"github.com/goroce/goroce/bth"
)

// Responder output kinds.
const (
	outACK = iota + 1
	outNAK
	outRead
	outAtomicACK
)

// outItem is one queued responder output: an ACK or NAK, an atomic ACK, or
// a READ response stream that Transmit turns into packets one at a time.
type outItem struct {
	kind     uint8
	syndrome bth.Syndrome
	psn      bth.PSN
	msn      uint32
	orig     uint64 // atomic ACK
	// READ response: the remote range still to send (its VA, length and
	// R_Key, resolved again for every packet) and whether the next packet
	// starts the stream (FIRST/ONLY).
	va    uint64
	rkey  bth.RKey
	rem   uint32
	first bool
}

// Responder resource kinds.
const (
	resRead = iota + 1
	resAtomic
)

// resource is one responder resource (rxe_resp.c struct resp_res): what a
// READ or ATOMIC request did, kept so that a duplicate is answered from it
// and never executed again.
type resource struct {
	kind              uint8
	firstPSN, lastPSN bth.PSN
	va                uint64
	length            uint32
	rkey              bth.RKey
	orig              uint64
	msn               uint32
}

// responder is the responder half of a QP.
type responder struct {
	psn     bth.PSN // expected PSN
	msn     uint32
	sentNAK bool // a PSN sequence NAK is outstanding (rxe sent_psn_nak)
	// lastOp is the opcode of the last accepted request packet, for the
	// sequence checks (0xFF = none: between messages).
	lastOp bth.Opcode
	// ucDrop: UC dropping the rest of a message after a PSN gap.
	ucDrop bool

	// Receive WQE in use by a multi-packet SEND.
	wqe      RecvWR
	wqeValid bool
	wqeLen   uint64 // sum of its SGE lengths
	wqeOff   uint32 // bytes written so far
	sgl      []SGE  // storage for wqe.SGL, allocated on first use

	// RDMA WRITE in progress: the RETH's VA and R_Key, resolved again for
	// every packet.
	wVA   uint64
	wRKey bth.RKey
	wOff  uint32
	wLen  uint32 // RETH DMA length (byte_len of WRITE_WITH_IMM)
	wLive bool

	res     []resource // ring of max_dest_rd_atomic entries
	resNext int

	out             []outItem // ring, allocated on first use
	outHead, outLen int
	// drain: the QP entered ERR because the responder NAKed; what was
	// queued before the NAK (answers to requests executed earlier) and the
	// NAK itself are still sent, in order.
	drain bool
}

func (r *responder) reset() {
	r.psn, r.msn, r.sentNAK, r.lastOp, r.ucDrop = 0, 0, false, 0xFF, false
	r.wqe, r.wqeValid, r.wqeLen, r.wqeOff = RecvWR{}, false, 0, 0
	r.wVA, r.wRKey, r.wOff, r.wLen, r.wLive = 0, 0, 0, 0, false
	for i := range r.res {
		r.res[i] = resource{}
	}
	r.resNext = 0
	for i := range r.out {
		r.out[i] = outItem{}
	}
	r.outHead, r.outLen = 0, 0
	r.drain = false
}

func (r *responder) sglStorage(n int) []SGE {
	if r.sgl == nil {
		r.sgl = make([]SGE, max(n, 1))
	}
	return r.sgl
}

func (r *responder) resizeResources(n int) {
	if n == len(r.res) {
		return
	}
	if n == 0 {
		r.res = nil
	} else {
		r.res = make([]resource, n)
	}
	r.resNext = 0
	// Output ring: one entry per resource plus room for ACKs and NAKs.
	if len(r.out) < n+16 && r.outLen == 0 {
		r.out = nil
	}
}

// push appends an output item; when the ring is full the item is dropped
// (the requester recovers by retrying). A plain ACK replaces a plain ACK at
// the tail: ACKs are cumulative, so only the newest matters.
func (r *responder) push(it outItem) {
	if r.out == nil {
		r.out = make([]outItem, len(r.res)+16)
	}
	if it.kind == outACK && r.outLen > 0 {
		tail := &r.out[(r.outHead+r.outLen-1)%len(r.out)]
		if tail.kind == outACK {
			*tail = it
			return
		}
	}
	if r.outLen == len(r.out) {
		return
	}
	r.out[(r.outHead+r.outLen)%len(r.out)] = it
	r.outLen++
}

func (r *responder) pop() {
	r.out[r.outHead] = outItem{}
	r.outHead = (r.outHead + 1) % len(r.out)
	r.outLen--
}

// clearOutput drops all queued output.
func (r *responder) clearOutput() {
	for r.outLen > 0 {
		r.pop()
	}
}

// respTransmit writes the next responder packet.
func (q *QP) respTransmit(buf []byte) (int, bool) {
	r := &q.resp
	for r.outLen > 0 {
		it := &r.out[r.outHead]
		if (q.state == StateErr && !r.drain) || q.state == StateReset || q.state == StateInit {
			r.pop()
			continue
		}
		switch it.kind {
		case outACK, outNAK:
			info := bth.OpRCAcknowledge.Info()
			var f bth.Fields
			q.bthFields(&f, bth.OpRCAcknowledge, it.psn, q.destQPN, false, false, 0)
			bth.Header(buf).Encode(&f)
			a := bth.AETH(buf[info.AETH:])
			a.SetSyndrome(it.syndrome)
			a.SetMSN(it.msn)
			r.pop()
			return info.HdrLen, true
		case outAtomicACK:
			info := bth.OpRCAtomicAcknowledge.Info()
			var f bth.Fields
			q.bthFields(&f, bth.OpRCAtomicAcknowledge, it.psn, q.destQPN, false, false, 0)
			bth.Header(buf).Encode(&f)
			a := bth.AETH(buf[info.AETH:])
			a.SetSyndrome(bth.SyndromeACKUnlimited)
			a.SetMSN(it.msn)
			bth.AtomicAckETH(buf[info.AtomicAckETH:]).SetOrigData(it.orig)
			r.pop()
			return info.HdrLen, true
		case outRead:
			if n := q.readResponse(it, buf); n > 0 {
				return n, true
			}
			// The READ's memory went away: it is a NAK now.
		default:
			r.pop()
		}
	}
	return 0, false
}

// readResponse emits the next packet of a READ response stream. Mirrors
// rxe_resp.c read_reply: FIRST/LAST/ONLY carry an AETH, MIDDLE does not;
// PSNs count up from the request PSN.
//
// The range is resolved again for every packet, as rxe_resp.c read_reply
// rechecks the MR (rxe_recheck_mr) for each packet after the first: once
// the owner has deregistered it (and hca's MR.Dereg has returned), no
// packet reads it. The rest of the stream then becomes a NAK, remote access
// error, and the QP enters ERR (rxe: RESPST_ERR_RKEY_VIOLATION); 0 is
// returned and the NAK is the next output.
func (q *QP) readResponse(it *outItem, buf []byte) int {
	pmtu := q.pmtu
	rem := it.rem
	n := min(rem, pmtu)
	var src []byte
	if n > 0 {
		b, err := q.cfg.Memory.Remote(q.cfg.PD, it.rkey, it.va, n, AccessRemoteRead)
		if err != nil || uint32(len(b)) != n {
			psn := it.psn
			q.resp.clearOutput()
			q.nakErr(bth.NAKRemoteAccessError, psn, StatusRemAccessErr)
			return 0
		}
		src = b
	}
	var op bth.Opcode
	switch {
	case it.first && rem <= pmtu:
		op = bth.OpRCRDMAReadResponseOnly
	case it.first:
		op = bth.OpRCRDMAReadResponseFirst
	case rem <= pmtu:
		op = bth.OpRCRDMAReadResponseLast
	default:
		op = bth.OpRCRDMAReadResponseMiddle
	}
	info := op.Info()
	pad := int(-n & 3)
	var f bth.Fields
	q.bthFields(&f, op, it.psn, q.destQPN, false, false, pad)
	bth.Header(buf).Encode(&f)
	if info.AETH != 0 {
		a := bth.AETH(buf[info.AETH:])
		a.SetSyndrome(bth.SyndromeACKUnlimited)
		a.SetMSN(it.msn)
	}
	copy(buf[info.HdrLen:], src)
	total := info.HdrLen + int(n) + pad
	clear(buf[info.HdrLen+int(n) : total])
	it.va += uint64(n)
	it.rem -= n
	it.first = false
	it.psn = it.psn.Add(1)
	if n == rem {
		q.resp.pop()
	}
	return total
}

// Receive processes one received packet: pkt is the BTH through the pad
// (ICRC verified and stripped); info describes the network header. pkt is
// used only during the call. Malformed or unacceptable packets are dropped
// and counted; Receive never panics.
func (q *QP) Receive(now Time, pkt []byte, info *RxInfo) {
	q.stats.RxPackets++
	if len(pkt) < bth.HeaderLen {
		q.stats.RxDropped++
		return
	}
	h := bth.Header(pkt)
	op := h.Opcode()
	oi := op.Info()
	if !oi.Valid() || h.TVer() != 0 || !q.opcodeMatchesType(op) || !pkeyMatch(h.PKey(), q.pkey) {
		q.stats.RxDropped++
		return
	}
	if d := h.DestQP(); d != q.cfg.QPN && !(q.cfg.Type == UD && d == bth.MulticastQPN) {
		q.stats.RxDropped++
		return
	}
	pad := h.PadCnt()
	if len(pkt) < oi.HdrLen+pad || (!oi.Has(bth.FlagPayload) && len(pkt) != oi.HdrLen) {
		q.stats.RxDropped++
		return
	}
	payload := pkt[oi.HdrLen : len(pkt)-pad]
	switch {
	case oi.Has(bth.FlagResp):
		if q.state != StateRTS && q.state != StateSQD {
			q.stats.RxDropped++
			return
		}
		q.completerRx(now, h, oi, pkt, payload)
	case oi.Has(bth.FlagReq):
		if q.state != StateRTR && q.state != StateRTS && q.state != StateSQD {
			q.stats.RxDropped++
			return
		}
		switch q.cfg.Type {
		case RC:
			q.rcRequest(h, oi, pkt, payload)
		case UC:
			q.ucRequest(h, oi, pkt, payload)
		case UD:
			q.udRequest(h, oi, pkt, payload, info)
		}
	default:
		q.stats.RxDropped++
	}
}

func (q *QP) opcodeMatchesType(op bth.Opcode) bool {
	switch q.cfg.Type {
	case RC:
		return op.Transport() == bth.TransportRC
	case UC:
		return op.Transport() == bth.TransportUC
	case UD:
		return op.Transport() == bth.TransportUD
	}
	return false
}

// pkeyMatch mirrors rxe pkey_match: the low 15 bits agree and at least one
// side is a full member.
func pkeyMatch(a, b bth.PKey) bool {
	if a&0x7FFF == 0 || b&0x7FFF == 0 {
		return false
	}
	return a&0x7FFF == b&0x7FFF && (a&0x8000 != 0 || b&0x8000 != 0)
}

// nakErr queues a NAK, completes the receive WQE in progress (if any) with
// wcStatus, and moves the QP to ERR (rxe_resp.c do_class_ac_error).
func (q *QP) nakErr(code bth.NAKCode, psn bth.PSN, wcStatus Status) {
	r := &q.resp
	q.stats.NAKsSent++
	r.push(outItem{kind: outNAK, syndrome: bth.NAKSyndrome(code), psn: psn, msn: r.msn})
	r.drain = true
	if r.wqeValid {
		r.wqeValid = false
		q.wc = Completion{WRID: r.wqe.ID, Status: wcStatus, Opcode: WCRecv, QPN: q.cfg.QPN, ByteLen: r.wqeOff}
		q.cfg.RecvCQ.Push(&q.wc)
		q.stats.CompletionErrors++
	}
	q.enterErr()
}

// seqOK checks the opcode sequence (rxe_resp.c check_op_seq): a MIDDLE or
// LAST must follow a FIRST or MIDDLE of the same operation, and a FIRST or
// ONLY must not interrupt a message.
func seqOK(last bth.Opcode, oi *bth.OpInfo, op bth.Opcode) bool {
	base := op &^ 0xE0
	lastBase := last &^ 0xE0
	inSend := last != 0xFF && (lastBase == bth.OpRCSendFirst || lastBase == bth.OpRCSendMiddle)
	inWrite := last != 0xFF && (lastBase == bth.OpRCRDMAWriteFirst || lastBase == bth.OpRCRDMAWriteMiddle)
	cont := oi.Any(bth.FlagMiddle) || (oi.Has(bth.FlagLast) && !oi.Has(bth.FlagFirst))
	switch {
	case inSend:
		return cont && oi.Has(bth.FlagSend)
	case inWrite:
		return cont && oi.Has(bth.FlagWrite)
	}
	_ = base
	return !cont
}

// lengthOK mirrors rxe_resp.c check_length: ONLY ≤ PMTU, FIRST and MIDDLE
// exactly PMTU (so pad 0), LAST 1..PMTU.
func (q *QP) lengthOK(oi *bth.OpInfo, n int, pad int) bool {
	if !oi.Has(bth.FlagPayload) {
		return true
	}
	pmtu := int(q.pmtu)
	switch {
	case oi.Has(bth.FlagOnly):
		return n <= pmtu
	case oi.Any(bth.FlagFirst | bth.FlagMiddle):
		return n == pmtu && pad == 0
	default: // LAST
		return n >= 1 && n <= pmtu
	}
}

// rcRequest is the RC responder. Mirrors rxe_resp.c rxe_responder: check
// PSN, op sequence, op validity, resources, length, rkey; execute; ACK.
func (q *QP) rcRequest(h bth.Header, oi *bth.OpInfo, pkt, payload []byte) {
	r := &q.resp
	psn := h.PSN()
	switch d := psn.Sub(r.psn); {
	case d > 0:
		// Ahead: one PSN sequence NAK with the expected PSN, then silence
		// until the expected packet arrives (rxe_resp.c check_psn).
		q.stats.RxOutOfSequence++
		if !r.sentNAK {
			r.sentNAK = true
			q.stats.SeqNAKsSent++
			r.push(outItem{kind: outNAK, syndrome: bth.NAKSyndrome(bth.NAKPSNSequenceError), psn: r.psn, msn: r.msn})
		}
		return
	case d < 0:
		q.stats.RxDuplicateRequests++
		q.duplicate(h, oi, pkt, psn)
		return
	}
	r.sentNAK = false
	op := h.Opcode()
	if !seqOK(r.lastOp, oi, op) {
		q.nakErr(bth.NAKInvalidRequest, psn, StatusRemInvReqErr)
		return
	}
	// Operation allowed by the QP's access flags (rxe check_op_valid). The
	// brief asks for remote access error here (IBA C9-... access rights).
	switch {
	case oi.Has(bth.FlagWrite) && q.access&AccessRemoteWrite == 0,
		oi.Has(bth.FlagRead) && q.access&AccessRemoteRead == 0,
		oi.Has(bth.FlagAtomic) && q.access&AccessRemoteAtomic == 0:
		q.nakErr(bth.NAKRemoteAccessError, psn, StatusRemAccessErr)
		return
	case oi.Any(bth.FlagRead|bth.FlagAtomic) && len(r.res) == 0:
		q.nakErr(bth.NAKInvalidRequest, psn, StatusRemInvReqErr)
		return
	case oi.Any(bth.FlagFlush | bth.FlagAtomicWrite):
		q.nakErr(bth.NAKInvalidRequest, psn, StatusRemInvReqErr)
		return
	}
	if !q.lengthOK(oi, len(payload), h.PadCnt()) {
		q.nakErr(bth.NAKInvalidRequest, psn, StatusRemInvReqErr)
		return
	}
	switch {
	case oi.Has(bth.FlagSend):
		if !q.rcSend(h, oi, pkt, payload, psn) {
			return
		}
	case oi.Has(bth.FlagWrite):
		if !q.rcWrite(h, oi, pkt, payload, psn) {
			return
		}
	case oi.Has(bth.FlagRead):
		q.rcRead(oi, pkt, psn)
		return
	case oi.Has(bth.FlagAtomic):
		q.rcAtomic(h, oi, pkt, psn)
		return
	default:
		q.stats.RxDropped++
		return
	}
	// SEND / WRITE packet executed.
	r.psn = psn.Add(1)
	if oi.Has(bth.FlagLast) {
		r.msn = (r.msn + 1) & 0xFFFFFF
		r.lastOp = 0xFF
	} else {
		r.lastOp = op
	}
	if h.AckReq() {
		r.push(outItem{kind: outACK, syndrome: bth.SyndromeACKUnlimited, psn: psn, msn: r.msn})
	}
}

// takeRecvWQE pops a receive WQE into the responder; false when the queue
// is empty.
func (q *QP) takeRecvWQE() bool {
	r := &q.resp
	wr, ok := q.cfg.RQ.Pop(r.sglStorage(q.cfg.MaxRecvSGE))
	if !ok {
		return false
	}
	r.wqe, r.wqeValid, r.wqeOff = wr, true, 0
	var n uint64
	for i := range wr.SGL {
		n += uint64(wr.SGL[i].Length)
	}
	r.wqeLen = n
	return true
}

// scatter writes data at byte offset off of the receive WQE's SGL.
func (q *QP) scatter(sgl []SGE, off uint64, data []byte) bool {
	for i := range sgl {
		if len(data) == 0 {
			return true
		}
		s := &sgl[i]
		if off >= uint64(s.Length) {
			off -= uint64(s.Length)
			continue
		}
		n := min(uint64(s.Length)-off, uint64(len(data)))
		b, err := q.cfg.Memory.Local(q.cfg.PD, s.LKey, s.Addr+off, uint32(n), AccessLocalWrite)
		if err != nil || uint64(len(b)) < n {
			return false
		}
		copy(b, data[:n])
		data = data[n:]
		off = 0
	}
	return len(data) == 0
}

// recvComplete completes the receive WQE in progress.
func (q *QP) recvComplete(wc *Completion) {
	q.resp.wqeValid = false
	if !q.cfg.RecvCQ.Push(wc) {
		q.enterErr()
	}
}

// rcSend executes a SEND packet; false when it was not accepted.
func (q *QP) rcSend(h bth.Header, oi *bth.OpInfo, pkt, payload []byte, psn bth.PSN) bool {
	r := &q.resp
	if oi.Has(bth.FlagFirst) {
		if !r.wqeValid && !q.takeRecvWQE() {
			// No receive WQE: RNR NAK with our min_rnr_timer; the PSN is
			// not consumed (rxe_resp.c check_resource).
			q.stats.RNRNAKsSent++
			r.push(outItem{kind: outNAK, syndrome: bth.RNRNAKSyndrome(q.minRNRTimer), psn: psn, msn: r.msn})
			return false
		}
		r.wqeOff = 0
	}
	if !r.wqeValid {
		q.nakErr(bth.NAKInvalidRequest, psn, StatusRemInvReqErr)
		return false
	}
	if uint64(r.wqeOff)+uint64(len(payload)) > r.wqeLen {
		// Larger than the receive buffer: LOC_LEN_ERR on our receive WC
		// (as IBA and hardware; rxe reports REM_INV_REQ_ERR), NAK invalid
		// request to the peer, QP to ERR.
		q.nakErr(bth.NAKInvalidRequest, psn, StatusLocLenErr)
		return false
	}
	if !q.scatter(r.wqe.SGL, uint64(r.wqeOff), payload) {
		// Bad local key in the receive WQE (rxe: malformed WQE, NAK remote
		// operational error); the WC says LOC_PROT_ERR.
		q.nakErr(bth.NAKRemoteOperational, psn, StatusLocProtErr)
		return false
	}
	r.wqeOff += uint32(len(payload))
	if !oi.Has(bth.FlagLast) {
		return true
	}
	q.wc = Completion{WRID: r.wqe.ID, Status: StatusSuccess, Opcode: WCRecv, ByteLen: r.wqeOff,
		QPN: q.cfg.QPN, Flags: WCWithGRH}
	if oi.ImmDt != 0 {
		q.wc.Imm = bth.ImmDt(pkt[oi.ImmDt:]).Imm()
		q.wc.Flags |= WCWithImm
	}
	if oi.IETH != 0 {
		rkey := bth.IETH(pkt[oi.IETH:]).RKey()
		if err := q.cfg.Memory.Invalidate(q.cfg.PD, rkey); err != nil {
			q.nakErr(bth.NAKInvalidRequest, psn, StatusRemInvReqErr)
			return false
		}
		q.wc.InvRKey = rkey
		q.wc.Flags |= WCWithInv
	}
	q.wc.Solicited = h.SE()
	q.recvComplete(&q.wc)
	return q.state != StateErr
}

// rcWrite executes an RDMA WRITE packet; false when it was not accepted.
func (q *QP) rcWrite(h bth.Header, oi *bth.OpInfo, pkt, payload []byte, psn bth.PSN) bool {
	r := &q.resp
	var dst []byte // the first packet's target, from the RETH's check
	if oi.Has(bth.FlagImmDt) && !r.wqeValid {
		if !q.takeRecvWQE() {
			q.stats.RNRNAKsSent++
			r.push(outItem{kind: outNAK, syndrome: bth.RNRNAKSyndrome(q.minRNRTimer), psn: psn, msn: r.msn})
			return false
		}
	}
	if oi.RETH != 0 {
		reth := bth.RETH(pkt[oi.RETH:])
		length := reth.DMALen()
		if length > MaxMessageSize {
			q.nakErr(bth.NAKInvalidRequest, psn, StatusRemInvReqErr)
			return false
		}
		r.wVA, r.wRKey, r.wOff, r.wLen, r.wLive = reth.VA(), reth.RKey(), 0, length, true
		if length > 0 {
			// The whole range is checked here, with the first packet.
			b, err := q.cfg.Memory.Remote(q.cfg.PD, r.wRKey, r.wVA, length, AccessRemoteWrite)
			if err != nil || uint32(len(b)) != length {
				q.nakErr(bth.NAKRemoteAccessError, psn, StatusRemAccessErr)
				return false
			}
			dst = b
		}
	}
	if !r.wLive {
		q.nakErr(bth.NAKInvalidRequest, psn, StatusRemInvReqErr)
		return false
	}
	// rxe_resp.c check_rkey: each packet carries min(resid, PMTU) bytes
	// and the last one the pad that makes the total 4-byte aligned.
	resid := r.wLen - r.wOff
	n := uint32(len(payload))
	if want := min(resid, q.pmtu); n != want || (oi.Has(bth.FlagLast) && n != resid) ||
		(!oi.Has(bth.FlagLast) && n == resid && resid != 0) {
		q.nakErr(bth.NAKInvalidRequest, psn, StatusRemInvReqErr)
		return false
	}
	if dst == nil && n > 0 {
		var ok bool
		if dst, ok = q.writeTarget(n); !ok {
			q.nakErr(bth.NAKRemoteAccessError, psn, StatusRemAccessErr)
			return false
		}
	}
	copy(dst, payload)
	r.wOff += n
	if !oi.Has(bth.FlagLast) {
		return true
	}
	r.wLive = false
	if oi.Has(bth.FlagImmDt) {
		q.wc = Completion{WRID: r.wqe.ID, Status: StatusSuccess, Opcode: WCRecvRDMAWithImm, ByteLen: r.wLen,
			QPN: q.cfg.QPN, Flags: WCWithGRH | WCWithImm, Imm: bth.ImmDt(pkt[oi.ImmDt:]).Imm()}
		q.wc.Solicited = h.SE()
		q.recvComplete(&q.wc)
		return q.state != StateErr
	}
	return true
}

// writeTarget resolves the next n bytes of the RDMA WRITE in progress.
// Every packet after the one with the RETH is resolved again, as rxe_resp.c
// check_rkey looks the MR up for every packet of a WRITE: once the owner
// has deregistered it (and hca's MR.Dereg has returned), the rest of the
// message is refused instead of landing in memory no longer registered.
func (q *QP) writeTarget(n uint32) ([]byte, bool) {
	r := &q.resp
	b, err := q.cfg.Memory.Remote(q.cfg.PD, r.wRKey, r.wVA+uint64(r.wOff), n, AccessRemoteWrite)
	return b, err == nil && uint32(len(b)) == n
}

// rcRead accepts an RDMA READ request: checks the R_Key, records a
// responder resource, increments the MSN (C9-148) and queues the response.
func (q *QP) rcRead(oi *bth.OpInfo, pkt []byte, psn bth.PSN) {
	r := &q.resp
	reth := bth.RETH(pkt[oi.RETH:])
	length := reth.DMALen()
	if length > MaxMessageSize {
		q.nakErr(bth.NAKInvalidRequest, psn, StatusRemInvReqErr)
		return
	}
	if length > 0 {
		// The whole range is checked here; readResponse resolves each
		// packet's part again when it sends it.
		b, err := q.cfg.Memory.Remote(q.cfg.PD, reth.RKey(), reth.VA(), length, AccessRemoteRead)
		if err != nil || uint32(len(b)) != length {
			q.nakErr(bth.NAKRemoteAccessError, psn, StatusRemAccessErr)
			return
		}
	}
	npkts := packets(length, q.pmtu)
	r.msn = (r.msn + 1) & 0xFFFFFF
	res := &r.res[r.resNext]
	r.resNext = (r.resNext + 1) % len(r.res)
	*res = resource{kind: resRead, firstPSN: psn, lastPSN: psn.Add(npkts - 1), va: reth.VA(), length: length,
		rkey: reth.RKey(), msn: r.msn}
	r.psn = psn.Add(npkts)
	r.lastOp = 0xFF
	r.push(outItem{kind: outRead, psn: psn, msn: r.msn, va: reth.VA(), rkey: reth.RKey(), rem: length, first: true})
}

// rcAtomic executes COMPARE_SWAP or FETCH_ADD once and records the original
// value for replay.
func (q *QP) rcAtomic(h bth.Header, oi *bth.OpInfo, pkt []byte, psn bth.PSN) {
	r := &q.resp
	a := bth.AtomicETH(pkt[oi.AtomicETH:])
	va := a.VA()
	if va&7 != 0 {
		q.nakErr(bth.NAKInvalidRequest, psn, StatusRemInvReqErr)
		return
	}
	b, err := q.cfg.Memory.Remote(q.cfg.PD, a.RKey(), va, 8, AccessRemoteAtomic)
	if err != nil || len(b) != 8 {
		q.nakErr(bth.NAKRemoteAccessError, psn, StatusRemAccessErr)
		return
	}
	var orig uint64
	if h.Opcode() == bth.OpRCCompareSwap {
		orig = atomicCompareSwap(b, a.Compare(), a.SwapAdd())
	} else {
		orig = atomicFetchAdd(b, a.SwapAdd())
	}
	r.msn = (r.msn + 1) & 0xFFFFFF
	res := &r.res[r.resNext]
	r.resNext = (r.resNext + 1) % len(r.res)
	*res = resource{kind: resAtomic, firstPSN: psn, lastPSN: psn, va: va, length: 8, rkey: a.RKey(), orig: orig, msn: r.msn}
	r.psn = psn.Add(1)
	r.lastOp = 0xFF
	r.push(outItem{kind: outAtomicACK, psn: psn, msn: r.msn, orig: orig})
}

// duplicate answers a request whose PSN is behind the expected one. Mirrors
// rxe_resp.c duplicate_request: SEND/WRITE are ACKed again with the last
// acknowledged PSN; READ and ATOMIC are answered from the responder
// resources, never executed again; anything else is dropped.
func (q *QP) duplicate(h bth.Header, oi *bth.OpInfo, pkt []byte, psn bth.PSN) {
	r := &q.resp
	switch {
	case oi.Any(bth.FlagSend | bth.FlagWrite):
		r.push(outItem{kind: outACK, syndrome: bth.SyndromeACKUnlimited, psn: r.psn.Add(0xFFFFFF), msn: r.msn})
	case oi.Has(bth.FlagRead):
		reth := bth.RETH(pkt[oi.RETH:])
		for i := range r.res {
			res := &r.res[i]
			if res.kind != resRead || psn.Less(res.firstPSN) || res.lastPSN.Less(psn) {
				continue
			}
			va, length := reth.VA(), reth.DMALen()
			if va < res.va || uint64(length) > uint64(res.length) ||
				va+uint64(length) > res.va+uint64(res.length) || length > MaxMessageSize {
				q.stats.RxDropped++
				return
			}
			if length > 0 {
				b, err := q.cfg.Memory.Remote(q.cfg.PD, res.rkey, va, length, AccessRemoteRead)
				if err != nil || uint32(len(b)) != length {
					q.stats.RxDropped++
					return
				}
			}
			r.push(outItem{kind: outRead, psn: psn, msn: res.msn, va: va, rkey: res.rkey, rem: length, first: true})
			return
		}
		q.stats.RxDropped++
	case oi.Has(bth.FlagAtomic):
		for i := range r.res {
			res := &r.res[i]
			if res.kind == resAtomic && res.firstPSN == psn {
				r.push(outItem{kind: outAtomicACK, psn: psn, msn: res.msn, orig: res.orig})
				return
			}
		}
		q.stats.RxDropped++
	default:
		q.stats.RxDropped++
	}
}

// ucRequest is the UC responder: no ACKs; on a PSN gap the current message
// is dropped until the next FIRST or ONLY (rxe_resp.c check_psn, UC case).
func (q *QP) ucRequest(h bth.Header, oi *bth.OpInfo, pkt, payload []byte) {
	r := &q.resp
	psn := h.PSN()
	start := oi.Has(bth.FlagFirst)
	if psn.Less(r.psn) {
		// Behind the expected PSN: a duplicate or a straggler overtaken by
		// later messages. rxe accepts an old FIRST/ONLY and so may deliver
		// a UC message twice or out of order; we drop it.
		q.stats.RxDuplicateRequests++
		q.stats.RxDropped++
		return
	}
	if psn != r.psn || r.ucDrop {
		if psn != r.psn {
			q.stats.RxOutOfSequence++
		}
		if !start {
			r.ucDrop = true
			r.lastOp = 0xFF
			r.wLive = false
			q.stats.RxDropped++
			r.psn = psn.Add(1)
			return
		}
		r.ucDrop = false
		r.lastOp = 0xFF
		r.wLive = false
	}
	r.psn = psn.Add(1)
	op := h.Opcode()
	drop := func() {
		q.stats.RxDropped++
		r.ucDrop = true
		r.lastOp = 0xFF
		r.wLive = false
	}
	if !seqOK(r.lastOp, oi, op) {
		if !start {
			drop()
			return
		}
		r.lastOp = 0xFF // a FIRST/ONLY after a lost LAST starts a new message
		r.wLive = false
	}
	if !q.lengthOK(oi, len(payload), h.PadCnt()) {
		drop()
		return
	}
	if oi.Has(bth.FlagSend) {
		if start {
			if !r.wqeValid && !q.takeRecvWQE() {
				q.stats.RxNoRecvWQE++
				drop()
				return
			}
			r.wqeOff = 0
		}
		if !r.wqeValid {
			drop()
			return
		}
		if uint64(r.wqeOff)+uint64(len(payload)) > r.wqeLen {
			q.wc = Completion{WRID: r.wqe.ID, Status: StatusLocLenErr, Opcode: WCRecv, QPN: q.cfg.QPN, ByteLen: r.wqeOff}
			q.stats.CompletionErrors++
			q.recvComplete(&q.wc)
			drop()
			return
		}
		if !q.scatter(r.wqe.SGL, uint64(r.wqeOff), payload) {
			q.wc = Completion{WRID: r.wqe.ID, Status: StatusLocProtErr, Opcode: WCRecv, QPN: q.cfg.QPN}
			q.stats.CompletionErrors++
			q.recvComplete(&q.wc)
			drop()
			return
		}
		r.wqeOff += uint32(len(payload))
		if !oi.Has(bth.FlagLast) {
			r.lastOp = op
			return
		}
		r.lastOp = 0xFF
		q.wc = Completion{WRID: r.wqe.ID, Status: StatusSuccess, Opcode: WCRecv, ByteLen: r.wqeOff,
			QPN: q.cfg.QPN, Flags: WCWithGRH}
		if oi.ImmDt != 0 {
			q.wc.Imm = bth.ImmDt(pkt[oi.ImmDt:]).Imm()
			q.wc.Flags |= WCWithImm
		}
		q.wc.Solicited = h.SE()
		q.recvComplete(&q.wc)
		return
	}
	// RDMA WRITE.
	if q.access&AccessRemoteWrite == 0 {
		drop()
		return
	}
	var dst []byte // the first packet's target, from the RETH's check
	if oi.RETH != 0 {
		reth := bth.RETH(pkt[oi.RETH:])
		length := reth.DMALen()
		if length > MaxMessageSize {
			drop()
			return
		}
		r.wVA, r.wRKey, r.wOff, r.wLen, r.wLive = reth.VA(), reth.RKey(), 0, length, true
		if length > 0 {
			b, err := q.cfg.Memory.Remote(q.cfg.PD, r.wRKey, r.wVA, length, AccessRemoteWrite)
			if err != nil || uint32(len(b)) != length {
				drop()
				return
			}
			dst = b
		}
	}
	if !r.wLive {
		drop()
		return
	}
	resid := r.wLen - r.wOff
	n := uint32(len(payload))
	if want := min(resid, q.pmtu); n != want || (oi.Has(bth.FlagLast) && n != resid) {
		drop()
		return
	}
	if oi.Has(bth.FlagLast) && oi.Has(bth.FlagImmDt) && !r.wqeValid && !q.takeRecvWQE() {
		q.stats.RxNoRecvWQE++
		drop()
		return
	}
	if dst == nil && n > 0 {
		var ok bool
		if dst, ok = q.writeTarget(n); !ok {
			drop()
			return
		}
	}
	copy(dst, payload)
	r.wOff += n
	if !oi.Has(bth.FlagLast) {
		r.lastOp = op
		return
	}
	r.lastOp = 0xFF
	r.wLive = false
	if oi.Has(bth.FlagImmDt) {
		q.wc = Completion{WRID: r.wqe.ID, Status: StatusSuccess, Opcode: WCRecvRDMAWithImm, ByteLen: r.wLen,
			QPN: q.cfg.QPN, Flags: WCWithGRH | WCWithImm, Imm: bth.ImmDt(pkt[oi.ImmDt:]).Imm()}
		q.wc.Solicited = h.SE()
		q.recvComplete(&q.wc)
	}
}

// udRequest is the UD responder: Q_Key check, then the GRH and the payload
// into a receive WQE (byte_len = 40 + payload).
func (q *QP) udRequest(h bth.Header, oi *bth.OpInfo, pkt, payload []byte, info *RxInfo) {
	d := bth.DETH(pkt[oi.DETH:])
	if d.QKey() != q.qkey {
		q.stats.RxQKeyMismatch++
		q.stats.RxDropped++
		return
	}
	if len(payload) > int(q.pmtu) {
		q.stats.RxDropped++
		return
	}
	r := &q.resp
	if !q.takeRecvWQE() {
		q.stats.RxNoRecvWQE++
		q.stats.RxDropped++
		return
	}
	if uint64(len(payload))+GRHLen > r.wqeLen {
		q.wc = Completion{WRID: r.wqe.ID, Status: StatusLocLenErr, Opcode: WCRecv, QPN: q.cfg.QPN,
			SrcQP: d.SrcQP()}
		q.stats.CompletionErrors++
		q.recvComplete(&q.wc)
		return
	}
	var grh [GRHLen]byte
	flags := WCFlags(0)
	if info != nil {
		grh = info.GRH
		if info.HasGRH {
			flags |= WCWithGRH
		}
	}
	if !q.scatter(r.wqe.SGL, 0, grh[:]) || !q.scatter(r.wqe.SGL, GRHLen, payload) {
		q.wc = Completion{WRID: r.wqe.ID, Status: StatusLocProtErr, Opcode: WCRecv, QPN: q.cfg.QPN}
		q.stats.CompletionErrors++
		q.recvComplete(&q.wc)
		return
	}
	q.wc = Completion{WRID: r.wqe.ID, Status: StatusSuccess, Opcode: WCRecv, ByteLen: uint32(GRHLen + len(payload)),
		QPN: q.cfg.QPN, SrcQP: d.SrcQP(), Flags: flags}
	if info != nil {
		q.wc.SLID, q.wc.SL = info.SLID, info.SL
	}
	if oi.ImmDt != 0 {
		q.wc.Imm = bth.ImmDt(pkt[oi.ImmDt:]).Imm()
		q.wc.Flags |= WCWithImm
	}
	q.wc.Solicited = h.SE()
	q.recvComplete(&q.wc)
}
