//go:build race

package hca

import "sync/atomic"

// The race detector cannot see the ordering a kernel socket (or any link)
// gives between one device writing a frame and another device reading it:
// an RDMA WRITE lands in the target's memory in one device's goroutine and
// the initiator learns of it from an ACK read in another's. Without an
// edge, two devices in one process (tests, goroce demo, --loopback) report
// false races on registered memory. In race builds, every link write
// releases and every link read acquires one process-wide atomic, which is
// the edge the kernel provides for real. Normal builds compile it away.
var raceLinkSync atomic.Uint64

func raceReleaseLink() { raceLinkSync.Add(1) }
func raceAcquireLink() { raceLinkSync.Load() }
