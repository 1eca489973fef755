// Package exchange implements the out-of-band TCP exchanges that rdma-core's
// ibv_*_pingpong examples and perftest's ib_*_bw / ib_*_lat tools use to
// swap QP numbers, PSNs, GIDs and memory keys before any RDMA traffic, byte
// for byte as the real, unmodified tools send them (rdma-core 44, perftest
// 4.5+0.17 whose version string is "6.06", as Debian bookworm ships them).
// goroce's pingpong and bench commands use it to connect QPs with those
// tools. The reference is the golden captures in the shared captures folder
// (TCP port 18515 of every capture); the tests replay them.
//
// This package imports the standard library and bth only.
//
// # Conventions
//
// The caller dials or accepts the TCP connection (DefaultPort, 18515), sets
// deadlines on it for timeouts, and closes it. Every message is written with
// one Write call: the tools read most messages with a single read(2) and
// give up if it returns less than the whole message. Every decoding failure
// is a *ParseError naming the message, the field and the bytes seen; every
// session failure is a *StepError naming the step; a peer that closes early
// gives a *ShortReadError. Nothing panics on garbage.
//
// All "%x" fields are fixed width and lowercase, and the parsers accept
// exactly that (so anything they accept formats back to the same bytes).
//
// # ibv_rc_pingpong, ibv_uc_pingpong, ibv_ud_pingpong
//
// One record, 52 bytes: sprintf("%04x:%06x:%06x:%s", LID, QPN, PSN, gid)
// plus its NUL, where gid is 32 hex digits, the 16 GID bytes in network order
// (gid_to_wire_gid prints each 32-bit word with %08x of its big-endian
// value). Example from rc_pingpong.pcap:
//
//	0000:000027:6698b8:00000000000000000000ffff0a4d0003\0
//
//	client -> server  52  client's record
//	                      (server moves its QP to RTR/RTS: pp_connect_ctx)
//	server -> client  52  server's record
//	client -> server   5  "done\0"
//	                      (client connects its QP, both close; traffic starts)
//
// The server reads the client's record and the client the server's with one
// read(2) each. The GID is all zero when the tool runs without -g (no GRH,
// which cannot work on RoCE). See PingpongClient and PingpongServer.
//
// # ibv_srq_pingpong
//
// The same, but each side sends its whole my_dest[MAX_QP] table: 256
// records = 13312 bytes each way, whatever -q is. The records after the
// first -q are the formatted zero value
// "0000:000000:000000:00000000000000000000000000000000\0", not zero bytes.
// The tool writes one record per write(2) and reads them with a loop, so
// segmentation does not matter here. Use SRQTable to build the table and
// pass SRQRecords to PingpongServer.
//
//	client -> server  256 x 52  client's table
//	server -> client  256 x 52  server's table (after connecting its -q QPs)
//	client -> server         5  "done\0"
//
// # perftest (ib_send_bw, ib_write_bw, ib_read_bw, ib_atomic_bw, ib_send_lat, ib_write_lat, ib_read_lat)
//
// Without -R (RDMA-CM), perftest uses one TCP connection. Every exchange is
// symmetric: ctx_xchg_data and ctx_hand_shake make the client write then
// read and the server read then write, so each line below is one message
// each way, client's first.
//
//	bytes  step (perftest function)
//	16     exchange_versions: the version string NUL padded ("6.06\0...")
//	4      check_sys_data (peer >= 5.32): cycle buffer, big-endian int (4096)
//	4      check_sys_data: cache line size, big-endian int (64); both keep the max
//	2      check_mtu (peer >= 5.1; 4 bytes to peers < 5.31): "%d\0" of the ibv_mtu
//	       enum ("3\0" = 1024); both use the smaller
//	108    ctx_hand_shake: keys of QP i, for each of the -q QPs
//	       (ctx_connect: QPs to RTR/RTS with the peer's keys)
//	108    ctx_hand_shake: keys of QP i, for each QP again     (printed)
//	108    ctx_hand_shake: keys of QP 0                        (after RTR)
//	       ib_send_bw and ib_send_lat do the last one before the second
//	       round, the other tools after it
//	...    per tool, below
//
// The keys message (KEY_PRINT_FMT_GID, always used on RoCE) is
//
//	"%04x:%04x:%06x:%06x:%08x:%016llx:" LID:OUT_READS:QPN:PSN:RKEY:VADDR:
//	+ 16 x "%02x:"                       GID bytes in network order
//	+ "%08x:" + NUL                      SRQN
//
// 108 bytes in all, for example (write_bw.pcap, client)
//
//	0000:0001:00002f:ae5a0f:00001fd9:000055b8433c3000:00:00:00:00:00:00:00:00:00:00:ff:ff:0a:4d:00:03:00000000:\0
//
// Without a GID index (native IB without -x) it is the 59-byte
// "%04x:%04x:%06x:%06x:%08x:%016llx:%08x" + NUL (PerftestConfig.NoGID).
// OUT_READS is the outstanding RDMA READ/atomic depth (1 for send and write
// tests, the device's max_qp_rd_atom - 128 on rxe - for read and atomic);
// RKEY and VADDR are what RDMA WRITE/READ/ATOMIC packets then carry. Every
// hand-shake after the two per-QP rounds carries QP 0's keys again.
//
// Per tool, after the hand-shake that follows ctx_connect:
//
//	ib_send_bw, ib_send_lat   (receives posted)
//	  108   ctx_hand_shake                     start barrier
//	        traffic
//	  108   ctx_hand_shake                     ctx_close_connection
//	  5     "done\0" each way, written by both sides without waiting for the
//	        other, so the two may appear in either order on the wire
//	ib_write_bw, ib_read_bw, ib_atomic_bw
//	        traffic (the client runs; the server only waits in the next
//	        hand-shake)
//	  108   ctx_hand_shake                     end of test
//	  8     xchg_bw_reports: size              big-endian u64
//	  8     iters                              big-endian u64 (u32 to peers < 5.33)
//	  8     bw_peak                            big-endian IEEE-754 double
//	  8     bw_avg                             big-endian double
//	  8     msgRate_avg                        big-endian double
//	        (+4 x 8: bw_avg_p1, msgRate_avg_p1, bw_avg_p2, msgRate_avg_p2
//	        with --report-per-port)
//	  108   ctx_hand_shake                     ctx_close_connection
//	  5     "done\0" each way, either order
//	ib_write_lat
//	  108   ctx_hand_shake                     start barrier
//	        traffic, then both close the socket: no last hand-shake, no "done"
//	ib_read_lat
//	  108   ctx_hand_shake                     start barrier
//	        traffic (only the client reads; the server is already waiting
//	        in the next hand-shake)
//	  108   ctx_hand_shake                     ctx_close_connection
//	  5     "done\0" each way, either order
//
// The server of ib_write/read/atomic_bw sends a report it never filled in
// (stack garbage in the captures); only the client's is meaningful.
//
// Hand-shakes in total with q QPs (Tool.HandShakes): send_bw, send_lat,
// write_bw, read_bw, atomic_bw, read_lat: 2q+3; write_lat: 2q+2. With q = 1
// the captures show 5, 5, 5 (4 before the reports, 1 after), 5, 5, and 4
// for write_lat. The golden captures all use one QP; the two per-QP
// rounds and where QP 0's hand-shake falls come from bridge captures of
// the real tools with -q 3, rxe against rxe (QPNs of the keys messages,
// client and server alike: ib_send_bw 11 12 13 11 11 12 13 11 11; ib_write_bw,
// ib_read_bw and ib_atomic_bw 14 15 16 14 15 16 14 14, reports, 14), and
// the remote keys the tools print are the second round's. An earlier model,
// one hand-shake with QP 0's keys and then one round, gave the same five
// messages with one QP but connected QP i to the peer's QP i-1 with
// several (interop/ cases write_bw_q4 and send_bw_q4). The placement of
// write_lat's fourth hand-shake comes from the perftest sources of that
// era. ib_read_lat has no golden capture; its sequence is the one the real
// tool showed against goroce in interop/ (bridge captures of
// read_lat.{goroce-to-rxe,rxe-to-goroce}): four hand-shakes, the client's
// reads, then ctx_close_connection on both sides (read_lat.c sends its
// server straight to ctx_close_connection; an ib_read_lat server whose
// client closes after four hand-shakes fails with "ethernet_read_keys:
// Couldn't read remote address"). The latency tools take one QP only.
// ib_send_bw/ib_send_lat with -a (RUN_ALL: a start barrier per size, and
// for send_bw one more after it) are driven by package bench on top of
// PerftestSession.Establish. -b (--bidirectional, duplex) of the
// bandwidth tools is Steps.Duplex: a start hand-shake, both sides' traffic,
// then the report swap (send_bw skips it with -D) and ctx_close_connection,
// as write_bw.c and send_bw.c run it with one size; package bench drives
// -b with -a per size on top of Establish. -R (RDMA-CM, whose setup
// travels in CM MADs) is not modelled.
//
// Versions: we advertise DefaultVersion ("6.06"). perftest >= 6.28 only
// runs its binary negotiate_params step when the peer's version is >= 6.28
// too, so it skips it with us. The version-dependent steps above follow the
// peer's version exactly as perftest computes them, including its C float
// rounding: check_mtu and xchg_bw_reports compare a float, so a peer
// "5.31" gets the 4-byte MTU message, "5.33" the 4-byte iters and "5.1" no
// MTU exchange at all, while check_sys_data compares a double ("5.32"
// exchanges sys data).
package exchange
