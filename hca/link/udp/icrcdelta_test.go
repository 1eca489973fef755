package udp

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/goroce/goroce/wire"
)

// The linear adjustment must equal a full recomputation for every ID and
// the frame lengths RoCE uses.
func TestIDDeltaMatchesRecomputation(t *testing.T) {
	var c idDeltaCache
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{48, 64, 300, 1082, 1086, 2106, 4154, 4158} {
		f := make([]byte, n)
		for i := range f {
			f[i] = byte(rng.Uint32())
		}
		binary.BigEndian.PutUint16(f[4:], 0)
		p := wire.Packet{Frame: f, Kind: wire.KindRoCEv2IPv4, IPOff: 0, UDPOff: 20,
			BTHOff: 28, ICRCOff: n - 4, LRHOff: -1, GRHOff: -1, EthOff: -1, VCRCOff: -1}
		base := wire.ICRC(f, &p)
		for _, id := range []uint16{1, 2, 3, 63, 64, 255, 0x8000, 0xFFFF, uint16(rng.Uint32())} {
			binary.BigEndian.PutUint16(f[4:], id)
			want := wire.ICRC(f, &p)
			if got := base ^ c.get(n).delta(id); got != want {
				t.Fatalf("len %d id %#x: delta gives %#08x, recomputation %#08x", n, id, got, want)
			}
		}
	}
}

func BenchmarkIDDelta(b *testing.B) {
	var c idDeltaCache
	c.get(4154)
	b.ReportAllocs()
	var x uint32
	for i := 0; b.Loop(); i++ {
		x ^= c.get(4154).delta(uint16(i & 63))
	}
	_ = x
}
