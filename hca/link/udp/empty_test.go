//go:build linux

package udp

import "testing"

// A zero-length datagram is not a RoCE packet: whatever path receives it
// (GRO or not, plain IPv4 or the raw socket), it is either handed up as a
// header-only frame, for the decoder above to drop and count, or dropped
// and counted here; never dropped unseen. The datagram after it is still
// delivered.
func TestEmptyDatagramCounted(t *testing.T) {
	for _, tc := range []struct {
		name  string
		plain bool
		gro   bool
	}{
		{"raw", false, true},
		{"plain gro", true, true},
		{"plain direct", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := newNetNS(t)
			a, b := openPair(t, ns, "127.0.0.1", "127.0.0.2", func(c *Config) { c.PlainIPv4 = tc.plain })
			defer a.Close()
			defer b.Close()
			if !tc.gro {
				noGRO(t, b)
			}
			sendZeros(t, ns, 0, 40)
			bufs := [][]byte{make([]byte, 2000), make([]byte, 2000)}
			sizes := make([]int, len(bufs))
			empty := 0
			for got := false; !got; {
				n, err := b.Read(bufs, sizes, 0)
				if err != nil {
					t.Fatal(err)
				}
				for i := range n {
					switch sizes[i] {
					case ipv4Hdr + udpHdr + 40:
						got = true
					case ipv4Hdr + udpHdr:
						empty++
					default:
						t.Fatalf("frame of %d bytes", sizes[i])
					}
				}
			}
			st := b.Stats()
			if empty == 0 && st.RxMalformed+st.RxTooLarge == 0 {
				t.Errorf("the empty datagram was dropped uncounted: %+v", st)
			}
		})
	}
}
