//go:build linux

package udp

import (
	"bytes"
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"
)

// TestIPv6ZeroUDPChecksum: rxe sends RoCEv2 over IPv6 with UDP checksum
// 0 (the ICRC protects the payload). The kernel drops such a datagram
// before any socket that has not enabled UDP_NO_CHECK6_RX, which made
// every IPv6 exchange with rxe fail in both directions. A sender with
// UDP_NO_CHECK6_TX puts the same zero on the wire here.
func TestIPv6ZeroUDPChecksum(t *testing.T) {
	ns := newNetNS(t, "fd00::1/128", "fd00::2/128")
	var b *Endpoint
	ns.do(t, func() {
		var err error
		if b, err = Open(Config{Addr: netip.MustParseAddr("fd00::1")}); err != nil {
			t.Fatal(err)
		}
	})
	defer b.Close()
	payload := make([]byte, 12+32+4) // BTH, payload, ICRC: the link only needs a datagram
	for i := range payload {
		payload[i] = byte(i)
	}
	ns.do(t, func() {
		fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fd)
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_NO_CHECK6_TX, 1); err != nil {
			t.Skipf("UDP_NO_CHECK6_TX: %v (cannot put a zero checksum on the wire here)", err)
		}
		src := &unix.SockaddrInet6{Addr: netip.MustParseAddr("fd00::2").As16()}
		if err := unix.Bind(fd, src); err != nil {
			t.Fatal(err)
		}
		dst := &unix.SockaddrInet6{Port: int(DefaultPort), Addr: netip.MustParseAddr("fd00::1").As16()}
		if err := unix.Sendto(fd, payload, 0, dst); err != nil {
			t.Fatal(err)
		}
	})
	// readN's watchdog fails the test if the datagram never arrives (the
	// kernel dropped it).
	if got := readN(t, b, 1)[0]; !bytes.HasSuffix(got, payload) {
		t.Fatalf("frame % x does not end with the datagram sent", got)
	}
}
