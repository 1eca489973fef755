package transport

import (
	"encoding/binary"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Atomic operations at the responder must be atomic with respect to every
// other atomic operation on the device, across QPs driven by different
// goroutines (IBA 9.4.5; rxe uses a device-wide spinlock, atomic_ops_lock).
//
// The 8 target bytes are in host byte order (the verbs contract: the
// application reads them as a uint64). When the Go address of those bytes
// is 8-byte aligned, sync/atomic operates on them directly; registered
// memory normally is, because MR buffers come from the allocator at page or
// word alignment and the VA is checked to be 8-byte aligned. Otherwise the
// package-wide mutex serializes them. A given address always takes the same
// path, so the two never race with each other on the same bytes.
var atomicMu sync.Mutex

func aligned8(b []byte) bool { return uintptr(unsafe.Pointer(&b[0]))&7 == 0 }

// atomicFetchAdd adds add to the uint64 in b and returns the old value.
func atomicFetchAdd(b []byte, add uint64) uint64 {
	if aligned8(b) {
		p := (*uint64)(unsafe.Pointer(&b[0]))
		return atomic.AddUint64(p, add) - add
	}
	atomicMu.Lock()
	old := binary.NativeEndian.Uint64(b)
	binary.NativeEndian.PutUint64(b, old+add)
	atomicMu.Unlock()
	return old
}

// atomicCompareSwap stores swap in b if it holds cmp and returns the old
// value.
func atomicCompareSwap(b []byte, cmp, swap uint64) uint64 {
	if aligned8(b) {
		p := (*uint64)(unsafe.Pointer(&b[0]))
		for {
			old := atomic.LoadUint64(p)
			if old != cmp {
				return old
			}
			if atomic.CompareAndSwapUint64(p, old, swap) {
				return old
			}
		}
	}
	atomicMu.Lock()
	old := binary.NativeEndian.Uint64(b)
	if old == cmp {
		binary.NativeEndian.PutUint64(b, swap)
	}
	atomicMu.Unlock()
	return old
}
