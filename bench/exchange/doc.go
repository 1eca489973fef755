// Package exchange implements the out-of-band TCP exchanges that rdma-core's
// ibv_*_pingpong examples and perftest's ib_*_bw / ib_*_lat tools use to
// swap QP numbers, PSNs, GIDs and memory keys before any RDMA traffic, byte
// for byte as the real, unmodified tools send them. goroce's pingpong and
// bench commands use it to connect QPs with those tools.
//
// This package imports the standard library and bth only.
package exchange
