// Package hca owns the verbs API and the runtime of a software HCA: Device
// (ibv_query_device attributes, one port, the GID table), PD, MR (the lkey /
// rkey table and its access checks), CQ (polling, blocking wait, completion
// events), QP (the ibv_modify_qp state machine with attribute masks), SRQ
// (with its limit event) and AH; and the goroutines that drive the
// transport engines over a link.Endpoint: one reader that receives batches
// and one worker that decodes, verifies the ICRC, demultiplexes by
// destination QPN, feeds the engines, fires their timers and writes their
// packets back in batches.
//
// Layering: hca imports transport, wire, bth and hca/link (the interface
// only; backends are constructed by the caller). It never touches header
// bits itself: frames are decoded and built by package wire.
package hca
