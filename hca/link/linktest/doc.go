// Package linktest is the conformance suite every link.Endpoint backend
// passes: Run(t, newPair) checks batched, in-order, intact delivery of real
// RoCE/IB frames (built and verified with package wire, ICRC included),
// frames up to the MTU, rejection of over-MTU frames with
// link.ErrFrameTooLarge, the batch size, Close unblocking a blocked Read
// with link.ErrClosed, no goroutine left behind, and concurrent Read and
// Write in both directions (run it under -race).
//
// This package imports the standard library, testing, and goroce's bth,
// wire and hca/link packages. It is used from tests only.
package linktest
