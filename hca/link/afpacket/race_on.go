//go:build race

package afpacket

import "sync/atomic"

// ioSync tells the race detector that a frame written by one endpoint
// happens before it is read by another: the kernel orders them, but the
// raw sendmmsg/recvmmsg system calls are invisible to the detector, so
// memory an HCA wrote before sending a frame (an RDMA WRITE's data, say)
// would look unsynchronised with the peer reading it after the
// completion. Mirrors the syscall package, whose Write does
// race.ReleaseMerge(&ioSync) and whose Read does race.Acquire(&ioSync).
// Race builds only; one atomic per batch.
var ioSync atomic.Uint64

func raceReleaseMerge() { ioSync.Add(1) }
func raceAcquire()      { ioSync.Load() }
