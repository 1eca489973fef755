// Package pingpong runs the traffic of rdma-core's example programs
// ibv_rc_pingpong, ibv_uc_pingpong, ibv_ud_pingpong and ibv_srq_pingpong on
// a goroce HCA, so that `goroce pingpong` interoperates with the real tools
// (and with itself) and prints what they print.
//
// What is mirrored from the C sources (rdma-core libibverbs/examples):
//
//   - resources: one PD, one MR, one CQ of rx_depth+1 entries (srq:
//     rx_depth+num_qp), QPs with max_send_wr 1 and max_recv_wr rx_depth (srq:
//     RC QPs on one SRQ of rx_depth WRs), all receives rx_depth deep;
//   - QP attributes: INIT with pkey_index 0, the port and access flags 0
//     (UD: Q_Key 0x11111111 instead of access flags); RTR with path_mtu (-m),
//     dest_qp_num, rq_psn, max_dest_rd_atomic 1, min_rnr_timer 12 (RC),
//     a global route with hop_limit 1, the peer's GID and our sgid_index
//     (-g), sl (-l); RTS with timeout 14, retry_cnt 7, rnr_retry 7, sq_psn,
//     max_rd_atomic 1 (RC). UC sets only the RTR path fields and the RTS
//     sq_psn; UD moves to RTR and RTS with sq_psn only and sends through an
//     AH with remote Q_Key 0x11111111. PSNs are random 24-bit values.
//   - the exchange: the 52-byte records of bench/exchange (256 of them for
//     srq), the server connecting its QPs before it answers, the client
//     after it has read the answer;
//   - the traffic: receives posted before the exchange, the client posts the
//     first SEND (srq: one per QP), and each QP sends again when both its
//     previous SEND and a receive have completed, until iters sends and
//     receives are done (srq: iters in total over all QPs, as the C loop
//     counts). Receives are re-posted when fewer than 2 (srq: num_qp+1)
//     remain. With Events the loop sleeps on the CQ's completion channel and
//     re-arms it, as -e does. Without it the loop polls, as the tools do:
//     on a device that receives in CQ.Poll (hca.Options.BusyPoll, which
//     goroce pingpong sets when it polls) it spins, yielding every 8 empty
//     polls; on any other it sleeps in CQ.Wait after a short spin, since
//     there the HCA's goroutines receive, and a thread spinning on a busy
//     core starves them (26.7 ms per iteration between two processes on 2
//     cores, against 0.2 ms with the sleep);
//   - the end, where goroce differs from the tools: each side exits as soon
//     as its own counts are done, so when the ACK of the other side's last
//     SEND is lost nobody answers its retransmissions, and under retry_cnt
//     7 (infinite in rxe) the C tools retransmit forever. An RC run here
//     waits LastAckGrace for that ACK once every receive is done, then
//     finishes without it (Result.LastSendUnacked; goroce pingpong says so
//     on stderr); and Close keeps an RC QP until the peer has been quiet
//     for 500 ms, so that a peer which lost our last ACK gets it again;
//   - the output: the "local address" and "remote address" lines (with
//     ud_pingpong's "PSN 0x...: GID" quirk in its local line), and the two
//     summary lines, computed with the C program's float arithmetic.
//
// Data checking, which the C tools barely do: the client fills its send
// buffer with a pattern (zero at every 4096-byte page start, as the tools'
// -c/--chk expects) and requires every message it receives to be that
// pattern echoed back; the server requires the first message to be a
// pattern some pingpong client sends (goroce's, or rdma-core's 0x7b or zero
// fill, with or without -c's page-start zeros) and every later message to
// equal it, and echoes it. Every receive lands in its own slot, which is
// poisoned after it is checked, so a receive that completes without writing
// its data is caught too. WC byte counts are checked. With Check the
// server also runs rc_pingpong's -c test (page starts zero) at the end.
//
// Deviations, on purpose: the tools default to no GID (-g absent), which
// cannot work on RoCE; Config.GIDIndex must name a GID, and a peer that
// sends an all-zero GID is refused with an error saying so. Inline sends and
// -o/-t (ODP, timestamps) are not modelled; neither changes the wire.
//
// Layering: pingpong imports the standard library, bth, transport, hca and
// bench/exchange. It never opens links or sockets: the caller passes the
// device and the connected TCP stream.
package pingpong
