// Package interop is goroce's interoperability harness against the Linux kernel's Soft-RoCE
// (rdma_rxe) and the rdma-core/perftest tools, running in a Debian bookworm VM under qemu.
//
// It owns the scripts in this directory (build.sh, up.sh, down.sh, vm-exec.sh, run.sh), the
// guest overlay (guest/), the guest command agent (agent/, agentproto/) and the test driver
// (interop_test.go, build tag "interop", so plain `go test ./...` never boots a VM). The
// matrix of cases is table data in matrix.go. See README.md for how to run it.
//
// It may import the standard library and interop/agentproto only (its plain unit tests also
// import hca/link/tun, to pin the tap host's MAC the guest is given). It drives goroce through
// the `goroce` binary (go build ./cmd/goroce), never by importing the engine, so what it
// tests is exactly what a user runs.
package interop
