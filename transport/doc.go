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
// This package imports the standard library and goroce's bth package only.
package transport
