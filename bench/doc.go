// Package bench owns goroce's perftest-grade benchmarks as a library used by
// `goroce bench`, `goroce demo` and the Go benchmarks of this package:
//
//   - Params and Mode: the seven perftest tests (send_bw, write_bw, read_bw,
//     atomic_bw, send_lat, write_lat, read_lat) with perftest's flags and
//     defaults (-s, -n, -a, -q, -D, -m, -x, -t, -r, -Q, -A, -u).
//   - Session: one side's QPs, CQs and memory, set up and connected with
//     perftest's attributes (perftest_resources.c ctx_modify_qp_to_*:
//     timeout -u 14, retry_cnt and rnr_retry 7, min_rnr_timer 12, hop limit
//     0xFF, max_dest_rd_atomic our out_reads, max_rd_atomic the peer's), and
//     its traffic loops (run_iter_bw with TX depth and CQ moderation,
//     run_iter_bw_server, the passive servers of write/read/atomic bw, the
//     ping-pongs of send_lat and write_lat, read_lat's one READ at a time).
//   - RunPeer: a whole run against a peer, goroce bench or the real
//     ib_*_bw/ib_*_lat, over perftest's TCP exchange (bench/exchange,
//     advertising "6.06"), including ib_send_bw/ib_send_lat -a, whose
//     per-size hand-shakes bench/exchange.Run does not model. RunLoopback
//     runs both roles in one process over a loopback TCP connection.
//   - Report output: perftest's text layout, JSON, CSV, and charts as SVG
//     and PNG drawn with the standard library only.
//   - MeasureCeiling: the link ceiling of --ceiling, full-MTU RoCE
//     packets blasted through the same link endpoints without an HCA;
//     MessageShape: the packets IBA makes of one message, which the shaped
//     ceiling blasts as plain UDP datagrams (the raw ceiling's uniform
//     full-MTU datagrams are a shape no RDMA WRITE can take).
//   - NewPair, RunChecks, WriteBW, SendLat, PrintBW, PrintLat: the in-process
//     pair and checks of `goroce demo`.
//
// Latency samples: send_lat and write_lat report half the round trip,
// read_lat the whole round trip, as perftest does. The bandwidth peak is the
// best rate over any window of at least a tenth of the run (perftest's
// per-WR peak is meaningless with batched software completions).
//
// Layering: bench imports the standard library, bth, wire, transport, hca,
// hca/link (the Endpoint interface, for the ceiling) and bench/exchange. It
// never opens links: callers construct them (cmd/goroce, the tests).
package bench
