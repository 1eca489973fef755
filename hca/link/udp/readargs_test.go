//go:build linux

package udp

import (
	"errors"
	"io"
	"testing"

	"github.com/goroce/goroce/wire"
)

// TestReadArgsMisuse: Read given a negative offset, an offset past a
// buffer or fewer sizes than buffers returns an error or a shorter batch,
// on every receive path, instead of panicking on an index; what it left
// queued is read afterwards.
func TestReadArgsMisuse(t *testing.T) {
	for _, tc := range []struct {
		name string
		v6   bool
		mod  func(*Config)
	}{
		{"raw", false, nil},
		{"plain", false, func(c *Config) { c.PlainIPv4 = true }},
		{"plain-nogro", false, func(c *Config) { c.PlainIPv4 = true }},
		{"ipv6", true, nil},
		{"ipv6-gro", true, func(c *Config) { c.GRO = true }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := newNetNS(t, "fd00::1/128", "fd00::2/128")
			sa, da := "127.0.0.1", "127.0.0.2"
			if tc.v6 {
				sa, da = "fd00::1", "fd00::2"
			}
			a, b := openPair(t, ns, sa, da, tc.mod)
			defer a.Close()
			defer b.Close()
			if tc.name == "plain-nogro" {
				noGRO(t, b)
			}
			if w, err := a.Write(mustFrames(t, a, b, 0, 4, 64), 0); w != 4 || err != nil {
				t.Fatalf("Write = %d, %v", w, err)
			}
			big := func() []byte { return make([]byte, 2048) }
			sizes := make([]int, 2)
			if n, err := b.Read([][]byte{big(), big()}, sizes, -1); n != 0 || err == nil || errors.Is(err, io.ErrShortBuffer) {
				t.Fatalf("Read at offset -1 = %d, %v; want an error naming the offset", n, err)
			}
			if n, err := b.Read([][]byte{big()}, sizes, 2048); n != 0 || !errors.Is(err, io.ErrShortBuffer) {
				t.Fatalf("Read at offset 2048 of a 2048-byte buffer = %d, %v; want io.ErrShortBuffer", n, err)
			}
			var p wire.Packet
			bufs := [][]byte{big(), make([]byte, 10)}
			n, err := b.Read(bufs, sizes, 20)
			if n != 1 || err != nil {
				t.Fatalf("Read at offset 20 into a 2048- and a 10-byte buffer = %d, %v; want 1 frame", n, err)
			}
			if err := p.Decode(bufs[0][20:20+sizes[0]], wire.FramingIP); err != nil {
				t.Fatalf("frame at offset 20: %v", err)
			}
			if n, err := b.Read([][]byte{big(), big()}, sizes[:1], 0); n != 1 || err != nil {
				t.Fatalf("Read with one size for two buffers = %d, %v; want 1 frame", n, err)
			}
			readFrames(t, b, 2, nil)
		})
	}
}
