package vnet

import "testing"

// BenchmarkIDDelta is the per-segment cost of correcting an ICRC for the
// IPv4 ID the kernel's segmentation gives it, against a CRC of the packet.
func BenchmarkIDDelta(b *testing.B) {
	var c IDCache
	c.Get(4154)
	b.ReportAllocs()
	var x uint32
	for i := 0; b.Loop(); i++ {
		x ^= c.Get(4154).Delta(uint16(i)) // IDs count up, as the kernel gives them
	}
	_ = x
}
