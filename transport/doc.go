// Package transport owns the per-QP protocol engines of the IBA transport
// layer: the requester (segmentation at the path MTU, PSN assignment, ACK
// request policy, retransmission on timeout and NAK, RNR retry, the
// max_rd_atomic limit), the responder (PSN checks, duplicate detection,
// READ and ATOMIC replay from responder resources, receive WQE consumption,
// R_Key / PD / access / bounds checks, ACK coalescing) and the completer
// (ACK, NAK, READ response and atomic ACK processing, completions in order).
//
// Engines are synchronous, single-owner state machines, as quic-go's
// ackhandler is: no goroutines, no locks of their own, no I/O and no clock.
// Time is an input (Time, nanoseconds on the caller's monotonic clock);
// packets in and out are BTH-first byte slices; memory, receive queues and
// completion queues are interfaces the caller (package hca) implements.
// That makes loss, reordering, timeouts and RNR exhaustively and
// deterministically testable.
//
// Behaviour mirrors Linux rxe (rxe_req.c, rxe_resp.c, rxe_comp.c) where the
// IBA leaves a choice; comments say so where it matters.
//
// Files: qp.go (QP, NewQP, Modify, PostSend, flush, timers), requester.go
// (Transmit, segmentation, go-back-N positioning), completer.go (ACK, NAK,
// READ response and atomic ACK processing), responder.go (Receive, RC/UC/UD
// request execution, duplicate replay, the ordered responder output queue),
// atomic.go (device-wide atomicity of COMPARE_SWAP/FETCH_ADD).
//
// One packet through the engine:
//
//  1. PostSend copies the WR into a send-queue slot (SGL, inline data) and
//     checks local keys; nothing is sent yet.
//  2. Transmit: queued responder output first (ACK/NAK, READ response
//     packets, atomic ACKs, FIFO); else the requester builds the next
//     packet of the WQE at reqIdx, honouring fence, max_rd_atomic and the
//     unacknowledged-PSN window (MaxUnackedBytes of packets, or the share
//     of it SetWindowLimit gives; halved on each loss down to rxe's 128,
//     regrown by one per progressing ACK), and arms the local ACK timer.
//  3. Receive: header checks (opcode/QP type, TVer, P_Key, DestQP, lengths),
//     then requests go to the responder (PSN check, sequence, access,
//     length, execute, queue the answer) and responses to the completer
//     (implicit ACKs, NAKs, READ data, atomic results, completions in
//     order).
//  4. Tick: local ACK timeout → go-back-N (one packet, with AckReq, until
//     an acknowledgment makes progress) or RETRY_EXC_ERR; RNR wait over →
//     go-back-N from the NAKed PSN.
//
// The requester's position is kept three ways that must always agree: the
// WQE it is at, the bytes of that WQE already sent and the next PSN (the
// WQE's first PSN plus one per MTU sent). Packet contents come from the
// first two and the PSN from the third, so every path that moves one —
// go-back-N (position), a completion of the WQE being re-sent
// (completeHead), an ACK that overtakes a retry (syncReq) — moves all
// three; the lossy tests assert this after every step (CheckRequester in
// export_test.go). An implicit acknowledgement of a SEND/WRITE resets the
// retry counters and ends a NAK-started retry, whatever response carried
// it (rxe_comp.c check_psn).
//
// Choices where rxe and the IBA (or hardware) differ, or rxe has no answer:
//   - A SEND larger than the receive buffer completes the receive WQE with
//     LOC_LEN_ERR (IBA, hardware; rxe says REM_INV_REQ_ERR); the peer gets
//     NAK invalid request either way.
//   - Missing remote access rights in the QP's access flags NAK with remote
//     access error (rxe: invalid request).
//   - A bad L_Key in a receive WQE completes it with LOC_PROT_ERR and NAKs
//     remote operational error (rxe: LOC_QP_OP_ERR).
//   - UC drops FIRST/ONLY packets behind the expected PSN (rxe would deliver
//     a duplicated or overtaken message).
//   - READ/ATOMIC with max_rd_atomic 0 is refused at post time (rxe would
//     stall the send queue forever).
//   - READ response data is read from memory as each response packet is
//     built, so a WRITE that follows the READ on the same QP may be visible
//     in response packets not yet sent (rxe builds the whole response before
//     it executes the next request).
//   - UC and UD requests carry AckReq 0, as kernel 6.1 rxe sends them (the
//     captures show it), not 1 on the last packet as for RC.
//   - After a local ACK timeout the requester resends one packet, with
//     AckReq set, and the rest of the window once an acknowledgment makes
//     progress (TCP's retransmission timeout); rxe resends the whole
//     window at once, which feeds a storm when the timeouts are spurious.
//
// This package imports the standard library and goroce's bth package only.
package transport
