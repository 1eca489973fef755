package hca

import (
	"errors"
	"sync"
	"testing"

	"github.com/goroce/goroce/wire"
)

func TestMRTableKeys(t *testing.T) {
	var tab mrTable
	pd := &PD{id: 7}
	buf := make([]byte, 64)
	a := &MR{pd: pd, buf: buf, addr: 0x1000, access: AccessLocalWrite | AccessRemoteWrite}
	if err := tab.add(a, 2); err != nil {
		t.Fatal(err)
	}
	rkey := uint32(a.rkey)
	if _, err := tab.resolve(7, rkey, 0x1000, 64, AccessRemoteWrite, false); err != nil {
		t.Fatalf("own key: %v", err)
	}
	for _, c := range []struct {
		name      string
		pd, key   uint32
		addr      uint64
		n         uint32
		need      Access
		want      error
		wantLocal bool
	}{
		{"wrong 8-bit key", 7, rkey ^ 1, 0x1000, 8, AccessRemoteWrite, errMemKey, false},
		{"no such index", 7, rkey + 0x100, 0x1000, 8, AccessRemoteWrite, errMemKey, false},
		{"index 0", 7, rkey & 0xFF, 0x1000, 8, AccessRemoteWrite, errMemKey, false},
		{"other PD", 8, rkey, 0x1000, 8, AccessRemoteWrite, errMemPD, false},
		{"right not granted", 7, rkey, 0x1000, 8, AccessRemoteRead, errMemRights, false},
		{"below the region", 7, rkey, 0xFFF, 8, AccessRemoteWrite, errMemRange, false},
		{"past the end", 7, rkey, 0x1000 + 60, 8, AccessRemoteWrite, errMemRange, false},
	} {
		if _, err := tab.resolve(c.pd, c.key, c.addr, c.n, c.need, c.wantLocal); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	if !tab.remove(a) || tab.remove(a) {
		t.Fatal("remove: want true once, then false")
	}
	if _, err := tab.resolve(7, rkey, 0x1000, 8, AccessRemoteWrite, false); !errors.Is(err, errMemKey) {
		t.Fatalf("deregistered key: %v, want %v", err, errMemKey)
	}
	// The index is reused with a new 8-bit key: the old key stays refused.
	b := &MR{pd: pd, buf: buf, addr: 0x1000, access: AccessLocalWrite | AccessRemoteWrite}
	if err := tab.add(b, 2); err != nil {
		t.Fatal(err)
	}
	if b.index != a.index || b.rkey == a.rkey {
		t.Fatalf("reuse: index %d key %#x after index %d key %#x", b.index, b.rkey, a.index, a.rkey)
	}
	if _, err := tab.resolve(7, rkey, 0x1000, 8, AccessRemoteWrite, false); !errors.Is(err, errMemKey) {
		t.Fatalf("old key of a reused index: %v, want %v", err, errMemKey)
	}
	if err := tab.add(&MR{pd: pd, buf: buf}, 2); err != nil {
		t.Fatal(err)
	}
	if err := tab.add(&MR{pd: pd, buf: buf}, 2); !errors.Is(err, ErrLimit) {
		t.Fatalf("third MR with max 2: %v, want ErrLimit", err)
	}
}

func TestAHTableHandles(t *testing.T) {
	var tab ahTable
	ah := &AH{addr: wire.Addr{SrcPort: 1234}}
	if err := tab.add(ah, 4); err != nil {
		t.Fatal(err)
	}
	var got wire.Addr
	if !tab.lookup(ah.Handle(), &got) || got.SrcPort != 1234 {
		t.Fatalf("lookup %#x: %+v", ah.Handle(), got)
	}
	// Handles the application makes up must not alias a real one.
	for _, h := range []uint32{0, ah.index, ah.Handle() + 1, ah.Handle() + 1<<8, ah.Handle() | 1<<31, ^uint32(0)} {
		if tab.lookup(h, &got) {
			t.Errorf("handle %#x found", h)
		}
	}
	if !tab.remove(ah) || tab.lookup(ah.Handle(), &got) {
		t.Fatal("destroyed AH still found")
	}
	// The next AH takes the slot, not the handle: a stale handle must
	// not name it.
	next := &AH{addr: wire.Addr{SrcPort: 99}}
	if err := tab.add(next, 4); err != nil {
		t.Fatal(err)
	}
	if next.index != ah.index || next.Handle() == ah.Handle() {
		t.Fatalf("reuse: index %d handle %#x after index %d handle %#x", next.index, next.Handle(), ah.index, ah.Handle())
	}
	if tab.lookup(ah.Handle(), &got) {
		t.Fatalf("the destroyed AH's handle %#x names the AH now in its slot", ah.Handle())
	}
}

// TestMRTableConcurrent registers and deregisters while other goroutines
// resolve (run with -race): a lookup sees a region whole or not at all.
func TestMRTableConcurrent(t *testing.T) {
	var tab mrTable
	pd := &PD{id: 1}
	buf := make([]byte, 4096)
	keep := &MR{pd: pd, buf: buf, addr: 0x10000, access: AccessLocalWrite | AccessRemoteWrite}
	if err := tab.add(keep, 1<<10); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				b, err := tab.resolve(1, uint32(keep.rkey), 0x10000, 4096, AccessRemoteWrite, false)
				if err != nil || len(b) != 4096 {
					t.Errorf("resolve of a live region: %d bytes, %v", len(b), err)
					return
				}
				for k := uint32(2); k < 40; k++ {
					if b, err := tab.resolve(1, k<<8|1, 0, 1, AccessLocalWrite, true); err == nil && len(b) != 1 {
						t.Errorf("short buffer %d", len(b))
						return
					}
				}
			}
		})
	}
	for i := range 2000 {
		m := &MR{pd: pd, buf: buf, addr: uint64(i) << 20, access: AccessLocalWrite}
		if err := tab.add(m, 1<<10); err != nil {
			t.Fatal(err)
		}
		if !tab.remove(m) {
			t.Fatal("remove failed")
		}
	}
	close(stop)
	wg.Wait()
}

// BenchmarkMRResolveParallel is the per-packet key lookup from several
// shards at once (go test -bench MRResolve -cpu 1,2): a lock taken for
// reading would bounce one cache line between the cores.
func BenchmarkMRResolveParallel(b *testing.B) {
	var tab mrTable
	pd := &PD{id: 1}
	mr := &MR{pd: pd, buf: make([]byte, 1<<16), addr: 0x10000, access: AccessLocalWrite | AccessRemoteWrite}
	if err := tab.add(mr, 16); err != nil {
		b.Fatal(err)
	}
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := tab.Remote(1, mr.rkey, 0x10000+4096, 4096, AccessRemoteWrite); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
