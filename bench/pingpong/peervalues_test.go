package pingpong

import (
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/goroce/goroce/bench/exchange"
	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/hca"
	"github.com/goroce/goroce/hca/link/memlink"
)

// TestServeRefusesSpecialQPNs: a peer record naming QPN 0, 1 or the
// multicast QPN is refused for every transport (on UD nothing else would
// refuse it: the SENDs would go to the peer's special QPs).
func TestServeRefusesSpecialQPNs(t *testing.T) {
	for _, typ := range []hca.QPType{hca.RC, hca.UC, hca.UD} {
		for _, qpn := range []bth.QPN{0, 1, bth.MulticastQPN} {
			t.Run(typ.String(), func(t *testing.T) {
				_, db := devPair(t, memlink.Config{})
				s, err := New(db, Config{Type: typ, Size: 64, Iters: 1, RxDepth: 4})
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				cc, sc := net.Pipe()
				go func() {
					defer cc.Close()
					exchange.PingpongClient(cc, []exchange.PingpongDest{{QPN: qpn, PSN: 1, GID: hca.GIDFromAddr(addrA)}})
				}()
				err = s.Serve(sc)
				sc.Close()
				if !errors.Is(err, exchange.ErrPeerQPN) {
					t.Fatalf("Serve with a peer at QPN %#x: %v, want ErrPeerQPN", uint32(qpn), err)
				}
			})
		}
	}
}

// TestServeSRQFewerPeerQPs: ibv_srq_pingpong's table holds zero records
// after the peer's own QPs; a peer with a smaller -q is named as such, not
// blamed for a missing -g.
func TestServeSRQFewerPeerQPs(t *testing.T) {
	_, db := devPair(t, memlink.Config{})
	s, err := New(db, Config{SRQ: 2, Size: 64, Iters: 2, RxDepth: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cc, sc := net.Pipe()
	go func() {
		defer cc.Close()
		tbl, _ := exchange.SRQTable([]exchange.PingpongDest{{QPN: 0x11, PSN: 1, GID: hca.GIDFromAddr(addrA)}})
		exchange.PingpongClient(cc, tbl)
	}()
	err = s.Serve(sc)
	sc.Close()
	if err == nil || !strings.Contains(err.Error(), "same -q") {
		t.Fatalf("Serve with 1 peer record for 2 QPs: %v, want an error naming -q", err)
	}
}
