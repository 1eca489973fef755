package udp

import (
	"bytes"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/wire"
)

// With Config.RxRing the packet socket sees packets before the IP layer
// does, so the ring path must refuse what the IP layer would have: a bad
// IPv4 header checksum (counted malformed), a packet for another address
// or, at the link layer, another host (the filter's, not counted); and it still takes a good packet, a packet
// longer than a slot (TP_STATUS_COPY) and one from an ordinary socket.
func TestRxRingRefusals(t *testing.T) {
	t.Setenv(rxRingEnv, "")
	ns := newNetNS(t)
	var a, b *Endpoint
	ns.do(t, func() { a, b = openPair0(t, "127.0.0.2", "127.0.0.1", func(c *Config) { c.RxRing = true }) })
	defer a.Close()
	defer b.Close()

	good := qpFrame(t, a, b, 0x11, 1, 64)
	badSum := bytes.Clone(qpFrame(t, a, b, 0x11, 2, 64))
	badSum[10] ^= 0x5A // IPv4 header checksum
	other := qpFrame(t, a, b, 0x11, 3, 64)
	copy(other[16:20], []byte{127, 0, 0, 3}) // another destination...
	wire.IPv4(other).SetChecksum(0)
	wire.IPv4(other).SetChecksum(wire.IPv4(other).CalculateChecksum()) // ...with a valid checksum
	otherHost := qpFrame(t, a, b, 0x11, 4, 64)                         // valid, but for another MAC
	// Injected below the IP layer, as a peer's NIC would deliver them:
	// a packet socket's send on lo loops back through netif_rx.
	ns.do(t, func() {
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fd)
		lo, err := net.InterfaceByName("lo")
		if err != nil {
			t.Fatal(err)
		}
		to := &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_IP), Ifindex: lo.Index, Halen: 6}
		for _, f := range [][]byte{badSum, other, good} {
			if err := unix.Sendto(fd, f, 0, to); err != nil {
				t.Fatal(err)
			}
		}
		// lo's address is 00:00:00:00:00:00: eth_type_trans makes this
		// PACKET_OTHERHOST, which the IP layer drops and so must the ring.
		to.Addr = [8]byte{0x02, 0, 0, 0, 0, 1}
		if err := unix.Sendto(fd, otherHost, 0, to); err != nil {
			t.Fatal(err)
		}
	})
	// A GSO super-datagram longer than a slot, through the link.
	var run [][]byte
	for k := range 12 {
		run = append(run, qpFrame(t, a, b, 0x12, bth.PSN(k), 4096))
	}
	if _, err := a.Write(run, 0); err != nil {
		t.Fatal(err)
	}
	// A datagram from an ordinary socket: in a slot, refused as malformed
	// by nobody (it is a well-formed UDP datagram, too short for RoCE).
	sendShort(t, ns)

	want := append([][]byte{good}, run...)
	bufs := make([][]byte, 32)
	for i := range bufs {
		bufs[i] = make([]byte, 8192)
	}
	sizes := make([]int, len(bufs))
	var got [][]byte
	deadline := time.Now().Add(10 * time.Second)
	for len(got) < len(want)+1 && time.Now().Before(deadline) {
		n, err := b.TryRead(bufs, sizes, 0)
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			got = append(got, bytes.Clone(bufs[i][:sizes[i]]))
		}
		if n == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	if len(got) != len(want)+1 {
		t.Fatalf("received %d packets, want %d; %+v", len(got), len(want)+1, b.Stats())
	}
	for i, w := range want {
		var p wire.Packet
		if err := p.Decode(got[i], wire.FramingIP); err != nil {
			t.Errorf("packet %d: %v", i, err)
		}
		// The IP ID and checksum, the UDP checksum and (with the ID it
		// covers) the ICRC are the kernel's or the link's; Decode checked
		// the ICRC. The addresses, ports and BTH through payload are ours.
		if len(got[i]) != len(w) || !bytes.Equal(got[i][12:26], w[12:26]) ||
			!bytes.Equal(got[i][28:len(w)-4], w[28:len(w)-4]) {
			t.Errorf("packet %d differs from the one sent", i)
		}
	}
	if short := got[len(got)-1]; len(short) != ipv4Hdr+udpHdr+5 {
		t.Errorf("last packet has %d bytes, want the 5-byte datagram", len(short))
	}
	s := b.Stats()
	if s.RxMalformed != 1 {
		t.Errorf("RxMalformed %d, want 1 (the bad IP checksum)", s.RxMalformed)
	}
	if s.RxRing != 4 { // bad checksum, good, the super-datagram, the short one
		t.Errorf("RxRing %d, want 4", s.RxRing)
	}
	if s.RxAggregates != 1 {
		t.Errorf("RxAggregates %d, want 1", s.RxAggregates)
	}
	if n, _ := b.TryRead(bufs, sizes, 0); n != 0 {
		t.Errorf("%d more packets (the one for 127.0.0.3?)", n)
	}
}

// rxRingGeometry: slots hold the largest RoCE packet at most, the blocks
// hold whole slots, and the frame count is what the kernel checks
// (packet_set_ring: frames per block × blocks).
func TestRxRingGeometry(t *testing.T) {
	for _, mtu := range []int{576, 1500, 4200, 9000, 65536} {
		r := rxRingGeometry(mtu, DefaultRxRingBytes)
		per := r.Block_size / r.Frame_size
		switch {
		case r.Frame_size%unix.TPACKET_ALIGNMENT != 0, r.Frame_size > rxRingSlotMax:
			t.Errorf("mtu %d: slot %d", mtu, r.Frame_size)
		case int(r.Frame_size) < min(rxRingDataOff+mtu, rxRingSlotMax-unix.TPACKET_ALIGNMENT):
			t.Errorf("mtu %d: slot %d too small", mtu, r.Frame_size)
		case r.Frame_nr != per*r.Block_nr, r.Block_size*r.Block_nr != DefaultRxRingBytes:
			t.Errorf("mtu %d: %+v", mtu, r)
		}
	}
}
