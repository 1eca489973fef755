package vnet

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/goroce/goroce/wire"
)

// icrcOf returns the ICRC of IPv4 RoCEv2 packet f computed over its
// current header.
func icrcOf(f []byte) uint32 {
	p := wire.Packet{Frame: f, Kind: wire.KindRoCEv2IPv4, IPOff: 0, UDPOff: 20, BTHOff: 28,
		ICRCOff: len(f) - 4, LRHOff: -1, GRHOff: -1, EthOff: -1, VCRCOff: -1}
	return wire.ICRC(f, &p)
}

// Every ID, with DF set and clear, is found back from the ICRC difference
// it makes, for packets of several lengths: the solver is exact, and the
// map from ID and flag to difference is one to one.
func TestIDSolverExhaustive(t *testing.T) {
	var c IDSolverCache
	for _, payload := range []int{0, 2, 1024, 4096} {
		f := roce(t, false, 0, 9, payload) // ID 0, DF set
		s := c.Get(len(f))
		base := icrcOf(f)
		seen := make(map[uint32]bool, 2<<16)
		for df := range 2 {
			g := append([]byte(nil), f...)
			if df == 0 {
				g[6] &^= 0x40
			}
			for id := range 1 << 16 {
				binary.BigEndian.PutUint16(g[4:], uint16(id))
				d := icrcOf(g) ^ base
				if seen[d] {
					t.Fatalf("payload %d: ID %#x DF %d makes a difference another ID and flag make", payload, id, df)
				}
				seen[d] = true
				gotID, gotDF, ok := s.Solve(d)
				if !ok || gotID != uint16(id) || gotDF != (df == 1) {
					t.Fatalf("payload %d: Solve(ID %#x DF %d) = %#x, %v, %v", payload, id, df, gotID, gotDF, ok)
				}
				if id == 300 && payload > 0 {
					break // the linearity argument needs no more for the long packets; the short one runs all
				}
			}
		}
	}
}

// A corrupted packet is explained by some ID only by chance: 2^17 of the
// 2^32 differences are IDs and flags, so about one random difference in
// 2^15. Single-byte corruptions are not random differences, and 18 of
// these 200 000 pass (6 would be 2^-15); the bound, 1 in 1000, catches a
// solver that explains what it should not, which would pass most.
func TestIDSolverRefusesCorruption(t *testing.T) {
	var c IDSolverCache
	f := roce(t, false, 0, 9, 1024)
	s := c.Get(len(f))
	base := icrcOf(f)
	rng := rand.New(rand.NewPCG(3, 4))
	g := append([]byte(nil), f...)
	const n = 200000
	passed := 0
	for range n {
		i := 28 + 12 + rng.IntN(len(f)-28-12-4) // payload
		x := byte(rng.UintN(255) + 1)
		g[i] ^= x
		if _, _, ok := s.Solve(icrcOf(g) ^ base); ok {
			passed++
		}
		g[i] ^= x
	}
	if passed > n/1000 {
		t.Fatalf("%d of %d corruptions explained by an ID", passed, n)
	}
	t.Logf("%d of %d single-byte corruptions explained by an ID (2^-15 expects %.1f)", passed, n, float64(n)/32768)
}
