package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
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
	return &xend{s: s, mac: ifc.HardwareAddr, bufs: [][]byte{make([]byte, xsk.ChunkSize)}, sizes: make([]int, 1)}, nil
}

// spinRecv spins on the RX ring until a frame is there and returns its
// length.
func (x *xend) spinRecv(deadline time.Time) (int, error) {
	for spins := 0; ; spins++ {
		if x.s.Recv(x.bufs, x.sizes, 0) == 1 {
			return x.sizes[0], nil
		}
		if spins&65535 == 65535 && time.Now().After(deadline) {
			return 0, errors.New("timed out")
		}
	}
}

func (x *xend) send(frame []byte) error {
	_, err := x.s.Send([][]byte{frame}, 0)
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

// runXDP is the -xdp ping-pong: each end holds the UDP port with a socket
// that drops what it gets (as goroce's link), receives from its AF_XDP
// socket and sends a frame to the other end's MAC through it.
func runXDP(nsA string, aAddr netip.Addr, nsB string, bAddr netip.Addr, size, n int, native bool, timeout time.Duration) error {
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
	xb, hb, err := open(nsB, bAddr)
	if err != nil {
		return err
	}
	defer unix.Close(hb)
	defer xb.s.Close()
	toB := ethFrame(xa.mac, xb.mac, aAddr, bAddr, port, size)
	toA := ethFrame(xb.mac, xa.mac, bAddr, aAddr, port, size)
	deadline := time.Now().Add(timeout)

	echoErr := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		for i := 0; i < n; i++ {
			k, err := xb.spinRecv(deadline)
			if err == nil && k != len(toB) {
				err = fmt.Errorf("got %d bytes, want %d", k, len(toB))
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
	for i := 0; i < n; i++ {
		t0 := time.Now()
		if err := xa.send(toB); err != nil {
			return fmt.Errorf("ping %d: %w", i, err)
		}
		sendDur = append(sendDur, time.Since(t0))
		if _, err := xa.spinRecv(deadline); err != nil {
			return fmt.Errorf("ping %d: %w", i, err)
		}
		lat = append(lat, time.Since(t0)/2)
	}
	if err := <-echoErr; err != nil {
		return err
	}
	printLat(fmt.Sprintf("Ethernet ping-pong %s %v <-> %s %v, %d-byte UDP payloads, %d round trips, AF_XDP (copy mode, native XDP %v) send and busy-polled RX ring",
		nsA, aAddr, nsB, bAddr, size, n, native), lat, sendDur)
	return nil
}
