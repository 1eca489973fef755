package memlink_test

import (
	"errors"
	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/wire"
	"net/netip"
	"testing"

	"github.com/goroce/goroce/hca/link"
	"github.com/goroce/goroce/hca/link/linktest"
	"github.com/goroce/goroce/hca/link/memlink"
)

func TestConformance(t *testing.T) {
	for _, f := range []link.Format{link.FormatIP, link.FormatEthernet, link.FormatIB} {
		t.Run(f.String(), func(t *testing.T) {
			linktest.Run(t, func(t *testing.T) (a, b link.Endpoint) {
				x, y := memlink.NewPair(memlink.Config{Format: f, BatchSize: 16})
				return x, y
			})
		})
	}
	t.Run("ipv6", func(t *testing.T) {
		linktest.Run(t, func(t *testing.T) (a, b link.Endpoint) {
			x, y := memlink.NewPair(memlink.Config{
				AddrsA: []netip.Addr{netip.MustParseAddr("fd00::1")},
				AddrsB: []netip.Addr{netip.MustParseAddr("fd00::2")},
			})
			return x, y
		})
	})
}

// TestCorruptionCaughtByICRC checks the promise of Faults.Corrupt: every
// corrupted RoCE frame fails wire.Decode with ErrBadICRC (or ErrBadVCRC).
func TestCorruptionCaughtByICRC(t *testing.T) {
	for _, f := range []link.Format{link.FormatIP, link.FormatEthernet, link.FormatIB} {
		t.Run(f.String(), func(t *testing.T) {
			a, b := memlink.NewPair(memlink.Config{Format: f, Seed: 11, AtoB: memlink.Faults{Corrupt: 1}})
			defer a.Close()
			defer b.Close()
			const n = 300
			for i := range n {
				fr, err := linktest.Frame(a, b, bth.PSN(i), i%40)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := a.Write([][]byte{fr}, 0); err != nil {
					t.Fatal(err)
				}
			}
			bufs := [][]byte{make([]byte, 4096)}
			sizes := []int{0}
			var p wire.Packet
			crc := 0
			for i := range n {
				if _, err := b.Read(bufs, sizes, 0); err != nil {
					t.Fatal(err)
				}
				err := p.Decode(bufs[0][:sizes[0]], wire.Framing(f))
				if err == nil {
					t.Fatalf("frame %d: corrupted frame decoded cleanly", i)
				}
				if errors.Is(err, wire.ErrBadICRC) || errors.Is(err, wire.ErrBadVCRC) {
					crc++
				}
			}
			if crc < n/2 {
				t.Fatalf("only %d of %d corruptions were CRC errors", crc, n)
			}
		})
	}
}
