package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/hca/link/xsk"
)

// xend is one side of the -xdp ping-pong: an AF_XDP socket (goroce's
// hca/link/xsk, whose program steers UDP to port 4791 to the interface's
// MAC into it) and the MAC it sends to.
type xend struct {
	s     *xsk.Socket
	mac   net.HardwareAddr
	bufs  [][]byte
	sizes []int
	// pkt, with -gso, is a packet socket (PACKET_VNET_HDR,
	// PACKET_QDISC_BYPASS) that sends each message as one UDP GSO
	// super-frame: the path an AF_XDP socket, which has no GSO, leaves
	// for a run of packets that should cross the stack as one skb.
	pkt int
	// udp, with -udpsend, sends a message through the end's UDP socket.
	udp func() error
	// stop ends a spinRecv in another goroutine, so that the rings are
	// not unmapped under it.
	stop atomic.Bool
}

// openXSK opens the socket on the interface that holds addr (in the
// calling thread's network namespace).
func openXSK(addr netip.Addr, native bool) (*xend, error) {
	ifc, err := ifaceOf(addr)
	if err != nil {
		return nil, err
	}
	s, err := xsk.Open(xsk.Config{Ifindex: ifc.Index, MAC: ifc.HardwareAddr, Native: native, RxFrames: 64, TxFrames: 64})
	if err != nil {
		return nil, err
	}
	x := &xend{s: s, mac: ifc.HardwareAddr, pkt: -1, sizes: make([]int, 64)}
	for range x.sizes {
		x.bufs = append(x.bufs, make([]byte, xsk.ChunkSize))
	}
	return x, nil
}

// qdiscPath (-qdisc) sends the -gso super-frames through the device's
// queueing (dev_queue_xmit) instead of PACKET_QDISC_BYPASS.
var qdiscPath bool

// openPacket opens x.pkt on the interface with index ifindex.
func (x *xend) openPacket(ifindex int) error {
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("packet socket: %w", err)
	}
	opts := []int{unix.PACKET_VNET_HDR, unix.PACKET_QDISC_BYPASS}
	if qdiscPath {
		opts = opts[:1] // through dev_queue_xmit, as goroce's afpacket link sends
	}
	for _, o := range opts {
		if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, o, 1); err != nil {
			unix.Close(fd)
			return fmt.Errorf("packet socket option %d: %w", o, err)
		}
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Ifindex: ifindex}); err != nil {
		unix.Close(fd)
		return fmt.Errorf("bind packet socket: %w", err)
	}
	x.pkt = fd
	return nil
}

// spinRecv spins on the RX ring until want frames are there and returns
// the length of the last.
func (x *xend) spinRecv(want int, deadline time.Time) (int, error) {
	got := 0
	for spins := 0; ; spins++ {
		if spins&1023 == 1023 && x.stop.Load() {
			return 0, errors.New("stopped")
		}
		if k := x.s.Recv(x.bufs[:want-got], x.sizes[:want-got], 0); k > 0 {
			if got += k; got == want {
				return x.sizes[k-1], nil
			}
		}
		if spins&65535 == 65535 && time.Now().After(deadline) {
			return 0, errors.New("timed out")
		}
	}
}

// send sends the frames of one message: through the packet socket (one
// super-frame after its virtio_net_hdr) when there is one, else all in
// one AF_XDP kick.
func (x *xend) send(frames [][]byte) error {
	if x.udp != nil {
		return x.udp()
	}
	if x.pkt >= 0 {
		if err := unix.Sendmsg(x.pkt, frames[0], nil, nil, 0); err != nil {
			return fmt.Errorf("packet socket sendmsg: %w", err)
		}
		return nil
	}
	_, err := x.s.Send(frames, 0)
	return err
}

func ifaceOf(addr netip.Addr) (*net.Interface, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	for i := range ifs {
		as, _ := ifs[i].Addrs()
		for _, a := range as {
			if n, ok := a.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Unmap() == addr {
					return &ifs[i], nil
				}
			}
		}
	}
	return nil, fmt.Errorf("no interface holds %v", addr)
}

// ethFrame builds an Ethernet/IPv4/UDP frame from src to dst with payload
// of size bytes (zeros), with a valid IPv4 header checksum and UDP
// checksum 0.
func ethFrame(srcMAC, dstMAC net.HardwareAddr, src, dst netip.Addr, port, size int) []byte {
	f := make([]byte, 14+20+8+size)
	copy(f[0:6], dstMAC)
	copy(f[6:12], srcMAC)
	binary.BigEndian.PutUint16(f[12:], 0x0800)
	ip := f[14:34]
	ip[0], ip[8], ip[9] = 0x45, 64, unix.IPPROTO_UDP
	binary.BigEndian.PutUint16(ip[2:], uint16(20+8+size))
	binary.BigEndian.PutUint16(ip[6:], 0x4000)
	s4, d4 := src.As4(), dst.As4()
	copy(ip[12:16], s4[:])
	copy(ip[16:20], d4[:])
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(ip[i:]))
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	binary.BigEndian.PutUint16(ip[10:], ^uint16(sum))
	binary.BigEndian.PutUint16(f[34:], uint16(port))
	binary.BigEndian.PutUint16(f[36:], uint16(port))
	binary.BigEndian.PutUint16(f[38:], uint16(8+size))
	return f
}

// gsoFrame is frame (an ethFrame of segs segments of size bytes each) as
// a UDP GSO super-frame for a PACKET_VNET_HDR socket: a virtio_net_hdr
// asking for UDP_L4 segmentation at size (little-endian fields, as
// packet sockets read them on x86) and, in the UDP checksum, the
// pseudo-header sum the kernel finishes per segment.
func gsoFrame(frame []byte, size int) []byte {
	h := make([]byte, 10, 10+len(frame))
	h[0], h[1] = 1, 5 // VIRTIO_NET_HDR_F_NEEDS_CSUM, VIRTIO_NET_HDR_GSO_UDP_L4
	binary.LittleEndian.PutUint16(h[2:], 14+20+8)
	binary.LittleEndian.PutUint16(h[4:], uint16(size))
	binary.LittleEndian.PutUint16(h[6:], 14+20) // csum_start: the UDP header
	binary.LittleEndian.PutUint16(h[8:], 6)     // csum_offset: its checksum
	f := append(h, frame...)[10:]
	ip := f[14:34]
	sum := uint32(unix.IPPROTO_UDP) + uint32(binary.BigEndian.Uint16(f[38:]))
	for i := 12; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(ip[i:]))
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	binary.BigEndian.PutUint16(f[40:], uint16(sum))
	return h[:10+len(frame)]
}

// runXDP is the -xdp ping-pong: each end holds the UDP port with a socket
// that drops what it gets (as goroce's link), receives from its AF_XDP
// socket and sends each message to the other end's MAC through it, as
// frames frames of size bytes in one kick, or, with gso > 1, as one UDP
// GSO super-frame of gso segments through a packet socket (which the
// peer's XDP program redirects whole).
//
// With udpSend each end sends through its UDP socket instead (connected to
// the peer's port 4791; with gso > 1 one UDP GSO super-datagram per
// message, UDP_SEGMENT), as goroce's udp link sends, and still receives
// from its AF_XDP socket.
func runXDP(nsA string, aAddr netip.Addr, nsB string, bAddr netip.Addr, size, n, frames, gso int, native, udpSend bool, timeout time.Duration) error {
	const port = 4791 // what the program steers
	open := func(ns string, addr netip.Addr) (*xend, int, error) {
		type res struct {
			x   *xend
			fd  int
			err error
		}
		c := make(chan res, 1)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
			e, err := openIn(ns, addr, port, false, false)
			if err != nil {
				c <- res{err: err}
				return
			}
			drop := []unix.SockFilter{{Code: unix.BPF_RET | unix.BPF_K, K: 0}}
			if err := unix.SetsockoptSockFprog(e.tx, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER,
				&unix.SockFprog{Len: 1, Filter: &drop[0]}); err != nil {
				e.close()
				c <- res{err: err}
				return
			}
			nsfd, err := unix.Open("/var/run/netns/"+ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err == nil {
				err = unix.Setns(nsfd, unix.CLONE_NEWNET)
				unix.Close(nsfd)
			}
			if err != nil {
				e.close()
				c <- res{err: fmt.Errorf("netns %s: %w", ns, err)}
				return
			}
			x, err := openXSK(addr, native)
			if err == nil && gso > 1 && !udpSend {
				var ifc *net.Interface
				if ifc, err = ifaceOf(addr); err == nil {
					err = x.openPacket(ifc.Index)
				}
				if err != nil {
					x.s.Close()
				}
			}
			if err != nil {
				e.close()
			}
			c <- res{x, e.tx, err}
		}()
		r := <-c
		return r.x, r.fd, r.err
	}
	xa, ha, err := open(nsA, aAddr)
	if err != nil {
		return err
	}
	defer unix.Close(ha)
	defer xa.s.Close()
	defer xa.closePacket()
	xb, hb, err := open(nsB, bAddr)
	if err != nil {
		return err
	}
	defer unix.Close(hb)
	defer xb.s.Close()
	defer xb.closePacket()
	msg := func(from, to *xend, src, dst netip.Addr) [][]byte {
		if gso > 1 {
			return [][]byte{gsoFrame(ethFrame(from.mac, to.mac, src, dst, port, gso*size), size)}
		}
		m := make([][]byte, frames)
		for i := range m {
			m[i] = ethFrame(from.mac, to.mac, src, dst, port, size)
		}
		return m
	}
	var toB, toA [][]byte
	if !udpSend {
		toB, toA = msg(xa, xb, aAddr, bAddr), msg(xb, xa, bAddr, aAddr)
	} else {
		if err := unix.Connect(ha, &unix.SockaddrInet4{Port: port, Addr: bAddr.As4()}); err != nil {
			return fmt.Errorf("connect: %w", err)
		}
		if err := unix.Connect(hb, &unix.SockaddrInet4{Port: port, Addr: aAddr.As4()}); err != nil {
			return fmt.Errorf("connect: %w", err)
		}
		payload := make([]byte, size*max(gso, 1))
		xa.udp = func() error { return send(ha, payload, size, gso, nil) }
		xb.udp = func() error { return send(hb, payload, size, gso, nil) }
	}
	// What arrives: each frame, or the super-frame whole.
	want, wantLen := frames, 14+20+8+size
	if gso > 1 {
		want, wantLen = 1, 14+20+8+gso*size
	}
	deadline := time.Now().Add(timeout)

	echoErr := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		for i := 0; i < n; i++ {
			k, err := xb.spinRecv(want, deadline)
			if err == nil && k != wantLen {
				err = fmt.Errorf("got %d bytes, want %d", k, wantLen)
			}
			if err == nil {
				err = xb.send(toA)
			}
			if err != nil {
				echoErr <- fmt.Errorf("echo %d: %w", i, err)
				return
			}
		}
		echoErr <- nil
	}()
	runtime.LockOSThread()
	lat := make([]time.Duration, 0, n)
	sendDur := make([]time.Duration, 0, n)
	fail := func(i int, err error) error {
		xb.stop.Store(true)
		<-echoErr // the echo loop has left the rings before they are closed
		return fmt.Errorf("ping %d: %w", i, err)
	}
	for i := 0; i < n; i++ {
		t0 := time.Now()
		if err := xa.send(toB); err != nil {
			return fail(i, err)
		}
		sendDur = append(sendDur, time.Since(t0))
		if _, err := xa.spinRecv(want, deadline); err != nil {
			return fail(i, err)
		}
		lat = append(lat, time.Since(t0)/2)
	}
	if err := <-echoErr; err != nil {
		return err
	}
	how := fmt.Sprintf("%d frame(s) per AF_XDP send", frames)
	switch {
	case udpSend:
		how = fmt.Sprintf("%d segment(s) per send on a connected UDP socket", max(gso, 1))
	case gso > 1:
		how = fmt.Sprintf("one UDP GSO super-frame of %d segments per packet-socket send", gso)
	}
	printLat(fmt.Sprintf("Ethernet ping-pong %s %v <-> %s %v, %d-byte UDP payloads, %d round trips, %s, AF_XDP (copy mode, native XDP %v) busy-polled RX ring",
		nsA, aAddr, nsB, bAddr, size, n, how, native), lat, sendDur)
	return nil
}

func (x *xend) closePacket() {
	if x.pkt >= 0 {
		unix.Close(x.pkt)
	}
}
