package bench

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/hca"
	"github.com/goroce/goroce/hca/link/memlink"
)

// memPair opens two devices joined by an in-memory link.
func memPair(t testing.TB) (*hca.Device, *hca.Device) {
	t.Helper()
	a, b, err := memlink.Pair(memlink.Config{QueueLen: 4096,
		AddrsA: []netip.Addr{netip.MustParseAddr("192.0.2.1")}, AddrsB: []netip.Addr{netip.MustParseAddr("192.0.2.2")}})
	if err != nil {
		t.Fatal(err)
	}
	da, err := hca.Open(a, hca.Options{Name: "goroce0"})
	if err != nil {
		t.Fatal(err)
	}
	db, err := hca.Open(b, hca.Options{Name: "goroce1"})
	if err != nil {
		da.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { da.Close(); db.Close() })
	return da, db
}

func TestLoopbackModesQuick(t *testing.T) {
	for _, m := range Modes {
		t.Run(m.String(), func(t *testing.T) {
			da, db := memPair(t)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			c, s, err := RunLoopback(ctx, da, db, Params{Mode: m, Iters: 50, Size: map[bool]int{true: 0, false: 4096}[m == ModeAtomicBW]}, Hooks{})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("client %+v", c.Results)
			t.Logf("server %+v", s.Results)
		})
	}
}
