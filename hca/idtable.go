package hca

import (
	"fmt"
	"sync"
	"sync/atomic"
)

// idTable maps 24-bit IDs (QPNs, MR key indices) to objects with lock-free
// reads, for lookups made per packet: a reader takes no lock and writes no
// shared memory, so shards on different cores never contend for a cache
// line here. Writers (set) must be serialized by the caller; the chunk
// holding an ID is allocated on its first set.
type idTable[T any] struct {
	chunks [1 << 12]atomic.Pointer[[1 << 12]atomic.Pointer[T]]
}

// get returns the object of id, or nil (also for an ID of more than 24
// bits, which no object has).
func (t *idTable[T]) get(id uint32) *T {
	if id >= 1<<24 {
		return nil
	}
	c := t.chunks[id>>12].Load()
	if c == nil {
		return nil
	}
	return c[id&0xFFF].Load()
}

// set stores v (nil: none) for id, a 24-bit ID; calls must be
// serialized.
func (t *idTable[T]) set(id uint32, v *T) {
	ci := id >> 12 & 0xFFF
	c := t.chunks[ci].Load()
	if c == nil {
		if v == nil {
			return
		}
		c = new([1 << 12]atomic.Pointer[T])
		t.chunks[ci].Store(c)
	}
	c[id&0xFFF].Store(v)
}

func (t *idTable[T]) each(f func(*T)) {
	for i := range t.chunks {
		c := t.chunks[i].Load()
		if c == nil {
			continue
		}
		for j := range c {
			if v := c[j].Load(); v != nil {
				f(v)
			}
		}
	}
}

// slotTable hands out small indices (never 0) to objects and looks them up
// by index without a lock (idTable). add and remove serialize on mu.
type slotTable[T any] struct {
	mu   sync.Mutex
	ids  idTable[T]
	top  uint32   // the highest index handed out
	free []uint32 // indices given back, for reuse
	n    int
	// gens[idx] is the 8-bit generation idx was last handed out with. It
	// counts per index, so an index reused comes back with a generation
	// none of its last 255 holders had: a handle or key kept from one of
	// them names nothing. A counter shared by all indices would give the
	// old value back whenever 255 adds at other indices came in between.
	gens []uint8
	// closed: clear has run (Device.Close); add refuses, so that an add
	// racing Close cannot leave an object in the table after it.
	closed bool
}

// add gives v an index and a generation for it, calls init(index, gen)
// under the table lock (where the object's lookup-visible fields, such as
// its keys, must be set: a reader may see v as soon as add stores it) and
// stores v. limit bounds the live entries; what names them in the error.
func (t *slotTable[T]) add(v *T, limit int, what string, init func(idx uint32, gen uint8)) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return ErrClosed
	}
	if t.n >= limit {
		return fmt.Errorf("%w: %s %d", ErrLimit, what, limit)
	}
	var idx uint32
	if k := len(t.free); k > 0 {
		idx = t.free[k-1]
		t.free = t.free[:k-1]
	} else {
		if t.top >= 1<<24-1 {
			return fmt.Errorf("%w: %s: no index left", ErrLimit, what)
		}
		t.top++
		idx = t.top
		for uint32(len(t.gens)) <= idx {
			t.gens = append(t.gens, 0)
		}
	}
	t.gens[idx]++
	init(idx, t.gens[idx])
	t.ids.set(idx, v)
	t.n++
	return nil
}

// remove takes v out of the table if it is still there at idx.
func (t *slotTable[T]) remove(v *T, idx uint32) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if idx == 0 || idx > t.top || t.ids.get(idx) != v {
		return false
	}
	t.ids.set(idx, nil)
	t.free = append(t.free, idx)
	t.n--
	return true
}

// clear removes every object and closes the table (Device.Close): later
// removes of them fail, lookups find nothing and adds return ErrClosed.
func (t *slotTable[T]) clear() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	for idx := uint32(1); idx <= t.top; idx++ {
		if t.ids.get(idx) != nil {
			t.ids.set(idx, nil)
			t.free = append(t.free, idx)
			t.n--
		}
	}
}

// get returns the object at idx, or nil.
func (t *slotTable[T]) get(idx uint32) *T {
	if idx == 0 {
		return nil
	}
	return t.ids.get(idx)
}
