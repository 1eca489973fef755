package afpacket

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"
)

// frameFor builds the first bytes of an untagged Ethernet frame, enough for
// the filter: ethertype, then an IPv4 or IPv6 header and a UDP header.
func frameFor(etherType uint16, dst netip.Addr, proto byte, dport uint16, frag uint16, ihl int) []byte {
	f := make([]byte, 14, 128)
	binary.BigEndian.PutUint16(f[12:], etherType)
	switch etherType {
	case etherTypeIPv4:
		ip := make([]byte, ihl*4)
		ip[0] = 0x40 | byte(ihl)
		binary.BigEndian.PutUint16(ip[6:], frag)
		ip[9] = proto
		d := dst.As4()
		copy(ip[16:], d[:])
		f = append(f, ip...)
	case etherTypeIPv6:
		ip := make([]byte, 40)
		ip[0] = 0x60
		ip[6] = proto
		d := dst.As16()
		copy(ip[24:], d[:])
		f = append(f, ip...)
	default:
		return append(f, make([]byte, 60)...)
	}
	udp := make([]byte, 8+12)
	binary.BigEndian.PutUint16(udp[0:], 0xC000)
	binary.BigEndian.PutUint16(udp[2:], dport)
	return append(f, udp...)
}

// TestFilter runs the receive filter in the kernel on a datagram
// socketpair (no root needed): a unix socket's filter sees the datagram
// from byte 0, as a packet socket's sees the frame.
func TestFilter(t *testing.T) {
	our4 := netip.MustParseAddr("10.99.0.2")
	our4b := netip.MustParseAddr("192.0.2.7")
	our6 := netip.MustParseAddr("fd99::2")
	our6b := netip.MustParseAddr("fe80::1234")
	other4 := netip.MustParseAddr("10.99.0.3")
	other6 := netip.MustParseAddr("fd99::3")
	tests := []struct {
		name  string
		addrs []netip.Addr
		frame []byte
		pass  bool
	}{
		{"v4 ours", []netip.Addr{our4, our6}, frameFor(etherTypeIPv4, our4, 17, 4791, 0x4000, 5), true},
		{"v4 second address", []netip.Addr{our4, our4b, our6}, frameFor(etherTypeIPv4, our4b, 17, 4791, 0, 5), true},
		{"v4 with options", []netip.Addr{our4}, frameFor(etherTypeIPv4, our4, 17, 4791, 0x4000, 6), true},
		{"v4 other address", []netip.Addr{our4, our6}, frameFor(etherTypeIPv4, other4, 17, 4791, 0x4000, 5), false},
		{"v4 other port", []netip.Addr{our4}, frameFor(etherTypeIPv4, our4, 17, 4792, 0x4000, 5), false},
		{"v4 tcp", []netip.Addr{our4}, frameFor(etherTypeIPv4, our4, 6, 4791, 0x4000, 5), false},
		{"v4 first fragment", []netip.Addr{our4}, frameFor(etherTypeIPv4, our4, 17, 4791, 0x2000, 5), false},
		{"v4 later fragment", []netip.Addr{our4}, frameFor(etherTypeIPv4, our4, 17, 4791, 0x0010, 5), false},
		{"v4 without v4 addresses", []netip.Addr{our6}, frameFor(etherTypeIPv4, our4, 17, 4791, 0x4000, 5), false},
		{"v6 ours", []netip.Addr{our4, our6}, frameFor(etherTypeIPv6, our6, 17, 4791, 0, 0), true},
		{"v6 link-local second", []netip.Addr{our6, our6b}, frameFor(etherTypeIPv6, our6b, 17, 4791, 0, 0), true},
		{"v6 other address", []netip.Addr{our6, our6b}, frameFor(etherTypeIPv6, other6, 17, 4791, 0, 0), false},
		{"v6 differs in last word", []netip.Addr{netip.MustParseAddr("fd99::1:2")}, frameFor(etherTypeIPv6, netip.MustParseAddr("fd99::1:3"), 17, 4791, 0, 0), false},
		{"v6 other port", []netip.Addr{our6}, frameFor(etherTypeIPv6, our6, 17, 9, 0, 0), false},
		{"v6 not udp", []netip.Addr{our6}, frameFor(etherTypeIPv6, our6, 58, 4791, 0, 0), false},
		{"v6 without v6 addresses", []netip.Addr{our4}, frameFor(etherTypeIPv6, our6, 17, 4791, 0, 0), false},
		{"RoCEv1", []netip.Addr{our4}, frameFor(etherTypeRoCEv1, netip.Addr{}, 0, 0, 0, 0), true},
		{"RoCEv1 no addresses", nil, frameFor(etherTypeRoCEv1, netip.Addr{}, 0, 0, 0, 0), true},
		{"ARP", []netip.Addr{our4}, frameFor(0x0806, netip.Addr{}, 0, 0, 0, 0), false},
		{"VLAN tagged", []netip.Addr{our4}, frameFor(0x8100, netip.Addr{}, 0, 0, 0, 0), false},
		{"runt", []netip.Addr{our4}, []byte{1, 2, 3}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			prog, err := roceFilter(tc.addrs)
			if err != nil {
				t.Fatal(err)
			}
			fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(fds[0])
			defer unix.Close(fds[1])
			if err := attachFilter(fds[1], prog); err != nil {
				t.Fatal(err)
			}
			if _, err := unix.Write(fds[0], tc.frame); err != nil {
				t.Fatal(err)
			}
			// A control datagram after it shows the socket works, so a
			// missing frame was filtered, not late.
			control := frameFor(etherTypeRoCEv1, netip.Addr{}, 0, 0, 0, 0)
			control[len(control)-1] = 0xEE // differs from every test frame
			if _, err := unix.Write(fds[0], control); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 256)
			// The control is queued already; the timeout only keeps a
			// broken filter from blocking the test.
			if err := unix.SetsockoptTimeval(fds[1], unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 10}); err != nil {
				t.Fatal(err)
			}
			n, err := unix.Read(fds[1], buf)
			if err != nil {
				t.Fatalf("reading the socketpair: %v", err)
			}
			gotFrame := string(buf[:n]) == string(tc.frame)
			if !gotFrame && string(buf[:n]) != string(control) {
				t.Fatalf("read %d bytes that are neither the frame nor the control", n)
			}
			if gotFrame != tc.pass {
				t.Fatalf("filter passed=%v, want %v", gotFrame, tc.pass)
			}
		})
	}
}

func TestFilterLimits(t *testing.T) {
	var many []netip.Addr
	for i := range maxFilterAddrs + 1 {
		many = append(many, netip.AddrFrom16([16]byte{0xfd, 15: byte(i)}))
	}
	if _, err := roceFilter(many); err == nil {
		t.Fatalf("%d IPv6 addresses accepted", len(many))
	}
	full := append(many[:maxFilterAddrs:maxFilterAddrs], make([]netip.Addr, 0)...)
	for i := range maxFilterAddrs {
		full = append(full, netip.AddrFrom4([4]byte{10, 0, 0, byte(i)}))
	}
	if _, err := roceFilter(full); err != nil {
		t.Fatalf("%d addresses of each family: %v", maxFilterAddrs, err)
	}
}
