package transport

import (
	"github.com/goroce/goroce/bth"
)

// Transmit writes the next packet this QP wants to send into buf — BTH
// first, through the pad, without ICRC — and returns its length and, for UD,
// the AH index of the work request (0 for RC and UC). ok is false when
// nothing is ready. Responder output (ACKs, NAKs, READ responses, atomic
// ACKs) goes before new requests. buf must hold PathMTU + 64 bytes.
func (q *QP) Transmit(now Time, buf []byte) (n int, ah uint32, ok bool) {
	if len(buf) < int(q.pmtu)+64 {
		return 0, 0, false
	}
	if n, ok = q.respTransmit(buf); ok {
		q.stats.TxPackets++
		return n, 0, true
	}
	if q.state != StateRTS && q.state != StateSQD {
		return 0, 0, false
	}
	n, ah, ok = q.reqTransmit(now, buf)
	if ok {
		q.stats.TxPackets++
	}
	return n, ah, ok
}

// reqTransmit builds the next request packet. Mirrors rxe_req.c
// rxe_requester: next WQE, fence and rd_atomic limits, the unacked-PSN
// window, opcode choice, then the packet.
func (q *QP) reqTransmit(now Time, buf []byte) (int, uint32, bool) {
	if q.rnrWait {
		return 0, 0, false
	}
	for {
		if q.reqIdx == q.sqTail {
			return 0, 0, false
		}
		w := q.slot(q.reqIdx)
		if w.errStatus != 0 {
			// Wait until it is the oldest, then complete it with its error.
			q.completeHeadLocalErr()
			return 0, 0, false
		}
		if w.sent { // UD message over the MTU: completes unsent
			q.reqIdx++
			q.completeUnreliable()
			continue
		}
		break
	}
	w := q.slot(q.reqIdx)
	starting := q.reqOff == 0 && q.reqIdx >= q.hiIdx
	if q.reqOff == 0 {
		// Mirrors rxe_req.c req_next_wqe: SQD starts no new WQE; a fenced
		// WQE waits until every earlier WQE has completed.
		if q.state == StateSQD && q.reqIdx >= q.hiIdx {
			return 0, 0, false
		}
		if w.flags&SendFence != 0 && q.reqIdx != q.sqHead {
			return 0, 0, false
		}
		if w.readOrAtomic() && q.rdAtomic >= q.maxRdAtomic {
			return 0, 0, false
		}
	}
	if q.cfg.Type == RC && (q.reqPSN.Sub(q.compPSN) > int32(q.window) || q.probe && q.reqPSN != q.compPSN) {
		return 0, 0, false
	}
	pmtu := q.pmtu
	if starting && w.op == WRRDMARead {
		// Once the request leaves, every PSN of the READ's responses is
		// outstanding, and PSNs compare only within 2^23 of each other:
		// the READ's PSNs and those still unacknowledged must stay below
		// that, or its own responses would compare as old. So a long READ
		// waits until nothing is outstanding; one that spans 2^23 PSNs by
		// itself (2^31 bytes at a path MTU of 256 set after it was posted;
		// PostSend refuses it otherwise) completes with LOC_LEN_ERR.
		span := packets(w.length, pmtu)
		if span >= psnHalf {
			w.errStatus = StatusLocLenErr
			q.completeHeadLocalErr()
			return 0, 0, false
		}
		if out := q.reqPSN.Sub(q.compPSN); out > 0 && uint32(out)+span >= psnHalf {
			return 0, 0, false
		}
	}
	if starting {
		w.firstPSN = q.reqPSN
		npkts := packets(w.length, pmtu)
		if w.atomic() {
			npkts = 1
		}
		w.lastPSN = w.firstPSN.Add(npkts - 1)
		q.hiIdx = q.reqIdx + 1
	}
	switch q.cfg.Type {
	case UD:
		return q.buildUD(w, buf)
	}
	switch {
	case w.op == WRRDMARead:
		return q.buildRead(now, w, buf)
	case w.atomic():
		return q.buildAtomic(now, w, buf)
	}
	return q.buildSendWrite(now, w, buf)
}

// psnHalf is half the 24-bit PSN space: the farthest apart two PSNs can be
// and still compare.
const psnHalf = 1 << 23

// packets is the number of packets (PSNs) a message of length bytes takes
// at path MTU pmtu: at least one.
func packets(length, pmtu uint32) uint32 {
	if length <= pmtu {
		return 1
	}
	return (length + pmtu - 1) / pmtu
}

// advanceWQE moves the requester past the WQE at reqIdx.
func (q *QP) advanceWQE(w *sendWQE) {
	if w.readOrAtomic() {
		q.rdAtomic++
	}
	q.reqIdx++
	q.reqOff = 0
}

// sentPacket records a transmitted packet: it moves sentPSN up to reqPSN
// and arms the local ACK timer if it is not running (rxe_req.c
// update_state).
func (q *QP) sentPacket(now Time) {
	if q.sentPSN.Less(q.reqPSN) {
		q.sentPSN = q.reqPSN
	}
	if q.cfg.Type == RC && q.timeout > 0 && !q.timerArmed {
		q.timerArmed = true
		q.timerAt = now + q.timeout
	}
}

// ackReq mirrors rxe_req.c init_req_packet: AckReq on the last packet of a
// message and on one packet in every RXE_MAX_PKT_PER_ACK+2 of a long one.
// The kernel 6.1 captures show AckReq clear on UC and UD packets.
func (q *QP) ackReq(last bool) bool {
	if q.cfg.Type != RC {
		return false
	}
	// After a local ACK timeout the one packet resent asks for its ACK,
	// whatever its place in the message: the requester waits for it.
	a := last || q.probe
	if !a {
		a = q.noackPkts > MaxPktPerAck
		q.noackPkts++
	}
	if a {
		q.noackPkts = 0
	}
	return a
}

// bthFields fills the BTH fields of a packet of q into f (zeroed by the
// caller), in place: returned as a struct, they were built in a temporary
// and copied into the caller's variable with 16-byte loads of 1- to 8-byte
// stores, which the store buffer cannot forward (perf of a loopback
// write_bw put 85 % of buildSendWrite's own samples on that copy).
func (q *QP) bthFields(f *bth.Fields, op bth.Opcode, psn bth.PSN, dest bth.QPN, se, ack bool, pad int) {
	f.Opcode, f.SE, f.PadCnt, f.PKey, f.DestQP, f.AckReq, f.PSN = op, se, pad, q.pkey, dest, ack, psn
}

// buildSendWrite emits the next packet of a SEND or RDMA WRITE message on
// RC or UC. Mirrors rxe_req.c next_opcode_rc/uc and init_req_packet.
func (q *QP) buildSendWrite(now Time, w *sendWQE, buf []byte) (int, uint32, bool) {
	pmtu := q.pmtu
	off := q.reqOff
	n := min(w.length-off, pmtu)
	first := off == 0
	last := off+n == w.length
	write := w.op == WRRDMAWrite || w.op == WRRDMAWriteWithImm
	var op bth.Opcode
	switch {
	case write && first && last:
		op = bth.OpRCRDMAWriteOnly
		if w.op == WRRDMAWriteWithImm {
			op = bth.OpRCRDMAWriteOnlyWithImmediate
		}
	case write && first:
		op = bth.OpRCRDMAWriteFirst
	case write && last:
		op = bth.OpRCRDMAWriteLast
		if w.op == WRRDMAWriteWithImm {
			op = bth.OpRCRDMAWriteLastWithImmediate
		}
	case write:
		op = bth.OpRCRDMAWriteMiddle
	case first && last:
		switch w.op {
		case WRSendWithImm:
			op = bth.OpRCSendOnlyWithImmediate
		case WRSendWithInv:
			op = bth.OpRCSendOnlyWithInvalidate
		default:
			op = bth.OpRCSendOnly
		}
	case first:
		op = bth.OpRCSendFirst
	case last:
		switch w.op {
		case WRSendWithImm:
			op = bth.OpRCSendLastWithImmediate
		case WRSendWithInv:
			op = bth.OpRCSendLastWithInvalidate
		default:
			op = bth.OpRCSendLast
		}
	default:
		op = bth.OpRCSendMiddle
	}
	if q.cfg.Type == UC {
		op |= bth.TransportUC
	}
	info := op.Info()
	pad := int(-n & 3)
	total := info.HdrLen + int(n) + pad
	if total > len(buf) {
		return 0, 0, false
	}
	if !q.gather(w, off, buf[info.HdrLen:info.HdrLen+int(n)]) {
		// The MR went away after posting: complete with LOC_PROT_ERR once
		// this WQE is the oldest (rxe: -EFAULT from copy_data).
		w.errStatus = StatusLocProtErr
		q.completeHeadLocalErr()
		return 0, 0, false
	}
	clear(buf[info.HdrLen+int(n) : total])
	psn := q.reqPSN
	se := last && w.flags&SendSolicited != 0 && (w.op == WRSend || w.op == WRSendWithImm || w.op == WRSendWithInv || w.op == WRRDMAWriteWithImm)
	var f bth.Fields
	q.bthFields(&f, op, psn, q.destQPN, se, q.ackReq(last), pad)
	bth.Header(buf).Encode(&f)
	if info.RETH != 0 {
		r := bth.RETH(buf[info.RETH:])
		r.SetVA(w.remoteAddr)
		r.SetRKey(w.rkey)
		r.SetDMALen(w.length)
	}
	if info.ImmDt != 0 {
		bth.ImmDt(buf[info.ImmDt:]).SetImm(w.imm)
	}
	if info.IETH != 0 {
		bth.IETH(buf[info.IETH:]).SetRKey(w.invRKey)
	}
	q.reqPSN = psn.Add(1)
	q.reqOff = off + n
	if last {
		if q.cfg.Type == UC {
			w.sent = true
		}
		q.advanceWQE(w)
		q.completeUnreliable()
	}
	q.sentPacket(now)
	return total, 0, true
}

// buildRead emits an RDMA READ request for what is still missing of w: the
// whole message, or after a partial response the rest (new VA and length,
// PSN = first missing), as rxe_req.c req_retry does.
func (q *QP) buildRead(now Time, w *sendWQE, buf []byte) (int, uint32, bool) {
	info := bth.OpRCRDMAReadRequest.Info()
	off := q.reqOff // non-zero only when goBack resumes a partial READ
	rem := w.length - min(off, w.length)
	var f bth.Fields
	q.bthFields(&f, bth.OpRCRDMAReadRequest, q.reqPSN, q.destQPN, false, q.ackReq(true), 0)
	bth.Header(buf).Encode(&f)
	r := bth.RETH(buf[info.RETH:])
	r.SetVA(w.remoteAddr + uint64(off))
	r.SetRKey(w.rkey)
	r.SetDMALen(rem)
	q.reqPSN = w.lastPSN.Add(1)
	q.advanceWQE(w)
	q.sentPacket(now)
	return info.HdrLen, 0, true
}

// buildAtomic emits a COMPARE_SWAP or FETCH_ADD request.
func (q *QP) buildAtomic(now Time, w *sendWQE, buf []byte) (int, uint32, bool) {
	op := bth.OpRCFetchAdd
	if w.op == WRAtomicCmpAndSwp {
		op = bth.OpRCCompareSwap
	}
	info := op.Info()
	var f bth.Fields
	q.bthFields(&f, op, q.reqPSN, q.destQPN, false, q.ackReq(true), 0)
	bth.Header(buf).Encode(&f)
	a := bth.AtomicETH(buf[info.AtomicETH:])
	a.SetVA(w.remoteAddr)
	a.SetRKey(w.rkey)
	if w.op == WRAtomicCmpAndSwp {
		a.SetSwapAdd(w.swap)
		a.SetCompare(w.compareAdd)
	} else {
		a.SetSwapAdd(w.compareAdd)
		a.SetCompare(0)
	}
	q.reqPSN = q.reqPSN.Add(1)
	q.advanceWQE(w)
	q.sentPacket(now)
	return info.HdrLen, 0, true
}

// buildUD emits a UD SEND ONLY (with immediate) with a DETH.
func (q *QP) buildUD(w *sendWQE, buf []byte) (int, uint32, bool) {
	op := bth.OpUDSendOnly
	if w.op == WRSendWithImm {
		op = bth.OpUDSendOnlyWithImmediate
	}
	info := op.Info()
	n := w.length
	pad := int(-n & 3)
	total := info.HdrLen + int(n) + pad
	if q.cfg.ValidAH != nil && !q.cfg.ValidAH(w.ah) {
		w.errStatus = StatusLocQPOpErr
		q.completeUnreliable()
		return 0, 0, false
	}
	if !q.gather(w, 0, buf[info.HdrLen:info.HdrLen+int(n)]) {
		w.errStatus = StatusLocProtErr
		q.completeUnreliable()
		return 0, 0, false
	}
	clear(buf[info.HdrLen+int(n) : total])
	se := w.flags&SendSolicited != 0
	var f bth.Fields
	q.bthFields(&f, op, q.reqPSN, w.remoteQPN, se, false, pad)
	bth.Header(buf).Encode(&f)
	d := bth.DETH(buf[info.DETH:])
	qkey := w.remoteQKey
	if qkey&0x80000000 != 0 {
		// IBA 10.2.5: a Q_Key with the high bit set in the WR means "use
		// the QP's own Q_Key" (rxe_req.c init_req_packet).
		qkey = q.qkey
	}
	d.SetQKey(qkey)
	buf[info.DETH+4] = 0
	d.SetSrcQP(q.cfg.QPN)
	if info.ImmDt != 0 {
		bth.ImmDt(buf[info.ImmDt:]).SetImm(w.imm)
	}
	q.reqPSN = q.reqPSN.Add(1)
	ah := w.ah
	w.sent = true
	q.reqIdx++
	q.reqOff = 0
	q.completeUnreliable()
	return total, ah, true
}

// gather copies w's bytes [off, off+len(dst)) into dst, from inline data or
// through the SGL. It reports false on a local key fault.
func (q *QP) gather(w *sendWQE, off uint32, dst []byte) bool {
	if len(dst) == 0 {
		return true
	}
	if w.isInline {
		copy(dst, w.inline[off:])
		return true
	}
	for i := range w.sgl {
		s := &w.sgl[i]
		if off >= s.Length {
			off -= s.Length
			continue
		}
		n := min(s.Length-off, uint32(len(dst)))
		b, err := q.cfg.Memory.Local(q.cfg.PD, s.LKey, s.Addr+uint64(off), n, 0)
		if err != nil || len(b) < int(n) {
			return false
		}
		copy(dst, b[:n])
		dst = dst[n:]
		off = 0
		if len(dst) == 0 {
			return true
		}
	}
	return len(dst) == 0
}

// goBack restarts transmission at the oldest unacknowledged PSN (go-back-N,
// rxe_req.c req_retry) and restarts the local ACK timer with the first
// packet sent again.
func (q *QP) goBack() {
	if q.sqHead == q.sqTail || q.sqHead >= q.hiIdx {
		return
	}
	q.stats.TxRetransmits++
	q.timerArmed = false
	q.position()
}

// position points the requester at compPSN: the oldest WQE resumes at its
// first unacknowledged packet (a READ is re-issued for the missing range,
// an atomic is sent again whole), later WQEs are sent again from their
// start with the same PSNs.
func (q *QP) position() {
	q.reqIdx = q.sqHead
	q.rdAtomic = 0
	q.noackPkts = 0
	q.reqOff = 0
	q.reqPSN = q.compPSN
	if q.sqHead == q.sqTail || q.sqHead >= q.hiIdx {
		return
	}
	w := q.slot(q.sqHead)
	if d := q.compPSN.Sub(w.firstPSN); d > 0 && !w.atomic() {
		q.reqOff = min(uint32(d)*q.pmtu, w.length)
	} else {
		q.reqPSN = w.firstPSN
	}
}

// TransmitResponse is Transmit restricted to responder output (ACKs, NAKs,
// READ responses, atomic ACKs already queued): the owner calls it when it
// destroys a QP, so that the peer still gets the acknowledgements of
// requests this QP has executed — as rxe's destroy lets its responder task
// finish — without starting any new request.
func (q *QP) TransmitResponse(now Time, buf []byte) (n int, ok bool) {
	if len(buf) < int(q.pmtu)+64 {
		return 0, false
	}
	if n, ok = q.respTransmit(buf); ok {
		q.stats.TxPackets++
	}
	return n, ok
}
