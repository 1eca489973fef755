package afpacket

import (
	"testing"

	"github.com/goroce/goroce/hca/netcfg"
)

// An offset outside the caller's buffers is API misuse: Write and Read
// return an error naming it instead of panicking on the slice.
func TestBadOffset(t *testing.T) {
	a, _, _ := openPair(t, netcfg.TwoHostsOptions{})
	bufs := [][]byte{make([]byte, 64)}
	for _, off := range []int{-1, 65} {
		if n, err := a.Write(bufs, off); n != 0 || err == nil {
			t.Errorf("Write(offset %d) = %d, %v, want an error", off, n, err)
		}
		if n, err := a.Read(bufs, []int{0}, off); n != 0 || err == nil {
			t.Errorf("Read(offset %d) = %d, %v, want an error", off, n, err)
		}
	}
}
