//go:build linux

package udp

import (
	"net"
	"testing"
)

// A direct receive (PlainIPv4 without GRO) that drops a datagram moves the
// ones after it into earlier buffers, which the caller may have made
// smaller: a datagram that fits its own buffer but not the earlier one must
// be dropped and counted there, not written past that buffer's end.
func TestDirectCompactsIntoSmallerBuffer(t *testing.T) {
	ns := newNetNS(t)
	a, b := openPair(t, ns, "127.0.0.1", "127.0.0.2", func(c *Config) { c.PlainIPv4 = true })
	defer a.Close()
	defer b.Close()
	noGRO(t, b)
	// 200 bytes: truncated in the 100-byte buffer 0; 150 bytes: fits
	// buffer 1, not buffer 0; 40 bytes: fits either.
	sendZeros(t, ns, 200, 150, 40)
	bufs := [][]byte{make([]byte, 100), make([]byte, 2000), make([]byte, 2000)}
	sizes := make([]int, len(bufs))
	got := 0
	for got < 1 {
		n, err := b.Read(bufs, sizes, 0)
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			if sizes[i] > len(bufs[i]) {
				t.Fatalf("frame %d: size %d in a %d-byte buffer", i, sizes[i], len(bufs[i]))
			}
		}
		got += n
		if n > 0 && sizes[n-1] != ipv4Hdr+udpHdr+40 {
			t.Fatalf("last frame %d bytes, want %d", sizes[n-1], ipv4Hdr+udpHdr+40)
		}
	}
	if st := b.Stats(); st.RxTooLarge != 2 {
		t.Errorf("RxTooLarge %d, want 2 (the truncated datagram and the one too large for buffer 0)", st.RxTooLarge)
	}
}

// sendZeros sends, inside ns, datagrams of zeros of the given sizes from a
// plain UDP socket on 127.0.0.1 to the RoCEv2 port of 127.0.0.2: what a
// hostile peer, not a goroce endpoint, puts on the wire.
func sendZeros(t *testing.T, ns *netNS, sizes ...int) {
	t.Helper()
	ns.do(t, func() {
		c, err := net.DialUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)}, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2), Port: 4791})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		for _, n := range sizes {
			if _, err := c.Write(make([]byte, n)); err != nil {
				t.Fatal(err)
			}
		}
	})
}
