// Package hca owns the verbs API and the runtime of a software HCA: Device
// (ibv_query_device attributes, one port, the GID table), PD, MR (the lkey /
// rkey table and its access checks), CQ (polling, blocking wait, completion
// events), QP (the ibv_modify_qp state machine with attribute masks), SRQ
// (with its limit event) and AH; and the goroutines that drive the
// transport engines over a link.Endpoint: readers that receive batches,
// decode them, verify the ICRC, demultiplex by destination QPN and feed the
// engines, and per-shard workers that fire the engines' timers and write
// their packets in batches. QPs are spread over shards by QPN so that they
// run on several cores (runtime.go has the details; Options.Shards). When
// the peer of a connection is another device of the same process, the
// goroutine that sent a batch also receives it from the peer's queue while
// it is in the cache (inline.go; Options.NoInlinePeers).
//
// Layering: hca imports transport, wire, bth and hca/link (the interface
// only; backends are constructed by the caller). It never touches header
// bits itself: frames are decoded and built by package wire.
package hca
