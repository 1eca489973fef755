package bench

import (
	"errors"
	"math"
	"net/netip"
	"strings"
	"testing"

	"github.com/goroce/goroce/bench/exchange"
	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/hca"
	"github.com/goroce/goroce/hca/link/memlink"
)

// A peer's keys may name any 24-bit QPN and any GID. On RC the QP's
// modify refuses QPN 0 and a zero GID, but on UD nothing did: the SENDs
// went to the peer's QP 0 or GSI without an error anywhere. Connect now
// refuses QPNs no data QP has, and an AH refuses a zero GID.

func TestConnectRefusesSpecialQPNs(t *testing.T) {
	for _, conn := range []hca.QPType{hca.RC, hca.UC, hca.UD} {
		for _, qpn := range []bth.QPN{0, 1, bth.MulticastQPN} {
			t.Run(conn.String(), func(t *testing.T) {
				da, db := memPair(t)
				s, err := NewSession(da, Params{Mode: ModeSendBW, Conn: conn, Iters: 10, Size: 64}, true)
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				g, _ := db.QueryGID(0)
				err = s.Connect([]exchange.PerftestDest{{QPN: qpn, PSN: 1, OutReads: 1, GID: g}}, bth.MTU1024)
				if !errors.Is(err, exchange.ErrPeerQPN) {
					t.Fatalf("Connect to remote QPN %#x: %v, want ErrPeerQPN", uint32(qpn), err)
				}
			})
		}
	}
}

func TestConnectRefusesZeroGID(t *testing.T) {
	for _, conn := range []hca.QPType{hca.RC, hca.UD} {
		t.Run(conn.String(), func(t *testing.T) {
			la, _, err := memlink.Pair(memlink.Config{QueueLen: 64, AddrsA: []netip.Addr{netip.MustParseAddr("2001:db8::1")},
				AddrsB: []netip.Addr{netip.MustParseAddr("2001:db8::2")}})
			if err != nil {
				t.Fatal(err)
			}
			da, err := hca.Open(la, hca.Options{Name: "g0"})
			if err != nil {
				t.Fatal(err)
			}
			defer da.Close()
			s, err := NewSession(da, Params{Mode: ModeSendBW, Conn: conn, Iters: 10, Size: 64, GIDIndex: -1, IPv6: true}, true)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			err = s.Connect([]exchange.PerftestDest{{QPN: 0x20, PSN: 1, OutReads: 1}}, bth.MTU1024)
			if !errors.Is(err, hca.ErrInvalidArg) {
				t.Fatalf("Connect to an all-zero GID: %v, want hca.ErrInvalidArg", err)
			}
			t.Log(err)
		})
	}
}

// TestRemoteResultNotFinite: a NaN, an infinity or a negative figure in
// a peer's report that this side prints (the passive server) or adds up
// (-b) is an error naming the field; it used to reach --json, which failed
// with a bare "json: unsupported value: NaN".
func TestRemoteResultNotFinite(t *testing.T) {
	p := Params{Mode: ModeWriteBW, Size: 65536, Iters: 1000}
	if err := p.Normalize(); err != nil {
		t.Fatal(err)
	}
	for _, v := range []float64{math.NaN(), math.Inf(1), -1} {
		_, err := remoteResult(p, exchange.BWReport{Size: 65536, Iters: 1000, BWPeak: 1, BWAvg: v, MsgRateAvg: 1})
		if !errors.Is(err, ErrPeerReport) || !strings.Contains(err.Error(), "bw_avg") {
			t.Errorf("peer report with bw_avg %v: %v, want ErrPeerReport naming bw_avg", v, err)
		}
	}
	if _, err := remoteResult(p, exchange.BWReport{Size: 65536, Iters: 1000, BWPeak: 2, BWAvg: 1, MsgRateAvg: 0.1}); err != nil {
		t.Errorf("a sound report: %v", err)
	}
}
