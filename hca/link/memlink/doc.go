// Package memlink is an in-memory link.Endpoint pair for tests and
// simulations: two connected endpoints with a frame format, an MTU, a fixed
// batch size, bounded queues and seeded fault injection (loss, reordering,
// duplication, corruption, delay) on each direction.
//
// A queue that is full drops the frame and counts it, as a switch port or a
// NIC ring would: transport engines must cope with loss anyway, and a
// blocking link would hide retransmission bugs and could deadlock two
// engines that both wait to write. Faults are drawn from a PRNG seeded by
// Config.Seed, one stream per direction, in the order frames are written,
// so a given seed and sequence of writes always selects the same frames.
//
// memlink performs no system calls and does not look inside frames except
// to find the transport headers, so that injected corruption always lands
// on bytes the ICRC covers.
//
// This package imports the standard library and goroce's hca/link only.
package memlink
