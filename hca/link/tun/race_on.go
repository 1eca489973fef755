//go:build race

package tun

import "sync/atomic"

// raceKernel stands for the kernel's queues in race builds: the race
// detector does not see a write(2) on one device and the read(2) that
// returns those bytes on another as synchronization, yet the reader does
// happen after the writer. Two HCAs in one process over TUNs (the tests)
// share memory through that path (RDMA WRITE data checked after the ACK
// came back), so every Write releases and every Read acquires this word.
// Normal builds compile it out.
var raceKernel atomic.Uint64

func raceRelease() { raceKernel.Add(1) }
func raceAcquire() { raceKernel.Load() }
