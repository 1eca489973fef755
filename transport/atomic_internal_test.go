package transport

import (
	"encoding/binary"
	"sync"
	"testing"
)

// TestAtomicsConcurrent runs FETCH_ADD and COMPARE_SWAP from many
// goroutines (QPs on different goroutines) on an 8-byte-aligned and on a
// misaligned Go address: no update may be lost, in either path.
func TestAtomicsConcurrent(t *testing.T) {
	backing := make([]byte, 32)
	for _, off := range []int{8, 3} {
		b := backing[off : off+8]
		binary.NativeEndian.PutUint64(b, 0)
		if aligned8(b) != (off == 8) {
			t.Skip("unexpected allocation alignment")
		}
		const workers, per = 8, 2000
		var wg sync.WaitGroup
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < per; i++ {
					if i%2 == 0 {
						atomicFetchAdd(b, 1)
						continue
					}
					for { // increment by CAS
						old := atomicFetchAdd(b, 0)
						if atomicCompareSwap(b, old, old+1) == old {
							break
						}
					}
				}
			}()
		}
		wg.Wait()
		if got := binary.NativeEndian.Uint64(b); got != workers*per {
			t.Fatalf("offset %d: %d, want %d", off, got, workers*per)
		}
		if old := atomicCompareSwap(b, 1, 99); old != workers*per || binary.NativeEndian.Uint64(b) != workers*per {
			t.Fatalf("offset %d: failed CAS changed the value", off)
		}
	}
}
