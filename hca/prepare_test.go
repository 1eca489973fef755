package hca_test

import (
	"net/netip"
	"slices"
	"sync"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/hca"
	"github.com/goroce/goroce/hca/link"
	"github.com/goroce/goroce/hca/link/memlink"
	"github.com/goroce/goroce/wire"
)

// preparing is an endpoint that records what the device asks it to
// prepare (link.Preparer).
type preparing struct {
	link.Endpoint
	mu   sync.Mutex
	dsts []netip.AddrPort
}

func (p *preparing) Prepare(dst netip.AddrPort) {
	p.mu.Lock()
	p.dsts = append(p.dsts, dst)
	p.mu.Unlock()
}

func (p *preparing) prepared() []netip.AddrPort {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.dsts)
}

// TestPrepareOnPathAndAH checks that a device tells a link.Preparer link
// about each RoCEv2 destination when a connected QP gets its path (RTR)
// and when an AH is created, before any frame goes there, and not for a
// modification without a path.
func TestPrepareOnPathAndAH(t *testing.T) {
	var pa *preparing
	da, db := pairWrapped(t, memlink.Config{}, 0, func(e link.Endpoint) link.Endpoint {
		pa = &preparing{Endpoint: e}
		return pa
	})
	a := pa.Endpoint.(*memlink.Endpoint)
	wantB := netip.AddrPortFrom(addrB, wire.RoCEv2Port)

	ea := newEnd(t, da, hca.RC, 4096, allAccess)
	eb := newEnd(t, db, hca.RC, 4096, allAccess)
	if got := pa.prepared(); len(got) != 0 {
		t.Fatalf("prepared %v before any path", got)
	}
	connect(t, ea, eb, bth.MTU1024, 1, 2)
	if got := pa.prepared(); !slices.Equal(got, []netip.AddrPort{wantB}) {
		t.Fatalf("prepared %v after RTR/RTS, want [%v] (RTR only: RTS has no path)", got, wantB)
	}
	if sent := a.Stats().Sent; sent != 0 {
		t.Fatalf("%d frames sent by connecting", sent)
	}

	bgid, err := db.QueryGID(0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ea.pd.CreateAH(hca.AHAttr{DGID: bgid, HopLimit: 64}); err != nil {
		t.Fatal(err)
	}
	if got := pa.prepared(); !slices.Equal(got, []netip.AddrPort{wantB, wantB}) {
		t.Fatalf("prepared %v after CreateAH, want [%v %v]", got, wantB, wantB)
	}
}
