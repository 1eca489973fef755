// Command udplat measures the floor under a user-space transport's send_lat
// on a path: a ping-pong of UDP datagrams between two network namespaces,
// each side a thread that busy-polls a non-blocking socket with recvmsg and
// answers with one sendmsg, which is the least a transport over UDP sockets
// does per message (goroce adds its protocol work and the ACK that rides
// in the same skb). It prints half the round trip, as perftest's send_lat
// does. It exists for the TCG guest of bench-vs-rxe, where a system call
// and a trip through the stack cost far more than on hardware:
//
//	/mnt/host/udplat [-n 10000] [-size 20] bvra 10.98.0.1 bvrb 10.98.0.2
//
// or with the two ends in two processes, as two RDMA applications are:
//
//	/mnt/host/udplat -role echo bvra 10.98.0.1 bvrb 10.98.0.2 &
//	/mnt/host/udplat -role ping bvra 10.98.0.1 bvrb 10.98.0.2
//
// With -xdp skb|drv the ends send and receive Ethernet frames through
// AF_XDP sockets instead; -frames 2 sends each message as two frames in
// one kick (goroce's XDP link with an ACK and its answer), -gso 2 as one
// UDP GSO super-frame of two segments through a packet socket (Linux 6.2+:
// 6.1's packet sockets refuse UDP_L4), -udpsend -gso 2 as one through the
// UDP socket (goroce's udp link's send, received by AF_XDP).
//
// Both sockets use port 18600 (-port); the namespaces are `ip netns` names.
package main

import (
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "udplat:", err)
		os.Exit(1)
	}
}

func run() error {
	n := flag.Int("n", 10000, "round trips")
	size := flag.Int("size", 20, "UDP payload bytes (20: a BTH, 2 bytes of SEND payload and pad, the ICRC)")
	port := flag.Int("port", 18600, "UDP port of both sockets")
	timeout := flag.Duration("timeout", 30*time.Second, "give up after this long")
	gso := flag.Int("gso", 0, "send each message as this many segments of -size bytes in one UDP GSO super-datagram (as goroce's ACK and answer); with -xdp, as one GSO super-frame through a packet socket")
	udpSend := flag.Bool("udpsend", false, "with -xdp: send on each end's UDP socket, connected (with -gso, UDP GSO), receive from the AF_XDP socket")
	flag.BoolVar(&qdiscPath, "qdisc", false, "with -xdp -gso: send the super-frames through the device's queueing (dev_queue_xmit), not PACKET_QDISC_BYPASS")
	frames := flag.Int("frames", 1, "with -xdp: send each message as this many frames of -size bytes in one AF_XDP kick (as goroce's XDP link sends an ACK and its answer)")
	role := flag.String("role", "both", "both: both ends in this process; ping or echo: one end, the other in another process (start echo first)")
	connect := flag.Bool("connect", false, "connect each end's sending socket to its peer (a cached route, no per-send lookup)")
	raw := flag.Bool("raw", false, "receive as goroce's udp link does over IPv4: on a raw socket, the UDP socket only holding the port (a filter drops all it gets)")
	ring := flag.Bool("ring", false, "as -raw, but receive from a packet socket's PACKET_RX_RING on the address's interface: busy polling reads shared memory, no system call")
	xdp := flag.String("xdp", "", "send and receive Ethernet frames through an AF_XDP socket (goroce's hca/link/xsk, copy mode) on the address's interface, its XDP program steering UDP to port 4791 (not -port) into it: drv (the driver's XDP) or skb (generic XDP); -role both only")
	flag.Parse()
	if flag.NArg() != 4 {
		return errors.New("usage: udplat [-n N] [-size B] NETNS_A ADDR_A NETNS_B ADDR_B")
	}
	aAddr, err := netip.ParseAddr(flag.Arg(1))
	if err != nil {
		return err
	}
	bAddr, err := netip.ParseAddr(flag.Arg(3))
	if err != nil {
		return err
	}
	if !aAddr.Is4() || !bAddr.Is4() {
		return errors.New("IPv4 addresses only")
	}
	if *ring {
		*raw = true
	}
	if *xdp != "" {
		if (*xdp != "drv" && *xdp != "skb") || *role != "both" || *connect || *raw || *frames < 1 || *frames > 64 || (*gso > 1 && *frames > 1) || (*udpSend && *frames > 1) {
			return errors.New("-xdp drv|skb, with -role both, without -connect, -raw, -ring, and with -frames 1..64 (not with -udpsend) or -gso")
		}
		return runXDP(flag.Arg(0), aAddr, flag.Arg(2), bAddr, *size, *n, *frames, *gso, *xdp == "drv", *udpSend, *timeout)
	}
	ping, echo := *role != "echo", *role != "ping"
	if *role != "both" && *role != "ping" && *role != "echo" {
		return fmt.Errorf("-role %q: both, ping or echo", *role)
	}
	var fa, fb end
	if ping {
		if fa, err = openIn(flag.Arg(0), aAddr, *port, *raw, *ring); err != nil {
			return err
		}
		defer fa.close()
	}
	if echo {
		if fb, err = openIn(flag.Arg(2), bAddr, *port, *raw, *ring); err != nil {
			return err
		}
		defer fb.close()
	}
	deadline := time.Now().Add(*timeout)
	toA := &unix.SockaddrInet4{Port: *port, Addr: aAddr.As4()}
	toB := &unix.SockaddrInet4{Port: *port, Addr: bAddr.As4()}
	if *connect {
		if ping {
			if err := unix.Connect(fa.tx, toB); err != nil {
				return fmt.Errorf("connect: %w", err)
			}
		}
		if echo {
			if err := unix.Connect(fb.tx, toA); err != nil {
				return fmt.Errorf("connect: %w", err)
			}
		}
		toA, toB = nil, nil
	}

	// B echoes every datagram back to A.
	echoErr := make(chan error, 1)
	echoLoop := func() {
		runtime.LockOSThread()
		buf := make([]byte, 2048)
		for i := 0; i < *n; i++ {
			k, err := fb.spinRecv(buf, deadline)
			if err != nil {
				echoErr <- fmt.Errorf("echo %d: %w", i, err)
				return
			}
			if *raw {
				k -= 28 // the IPv4 and UDP headers
			}
			if err := send(fb.tx, buf[:k], *size, *gso, toA); err != nil {
				echoErr <- fmt.Errorf("echo %d: %w", i, err)
				return
			}
		}
		echoErr <- nil
	}
	if !ping {
		echoLoop()
		return <-echoErr
	}
	if echo {
		go echoLoop()
	} else {
		close(echoErr)
	}

	runtime.LockOSThread()
	segs := max(*gso, 1)
	msg, buf := make([]byte, *size*segs), make([]byte, 65536)
	lat := make([]time.Duration, 0, *n)
	sendDur := make([]time.Duration, 0, *n)
	for i := 0; i < *n; i++ {
		t0 := time.Now()
		if err := send(fa.tx, msg, *size, *gso, toB); err != nil {
			return fmt.Errorf("ping %d: %w", i, err)
		}
		sendDur = append(sendDur, time.Since(t0))
		if _, err := fa.spinRecv(buf, deadline); err != nil {
			return fmt.Errorf("ping %d: %w", i, err)
		}
		lat = append(lat, time.Since(t0)/2)
	}
	if err, ok := <-echoErr; ok && err != nil {
		return err
	}
	how := "UDP socket"
	if *ring {
		how = "packet socket's RX ring"
	} else if *raw {
		how = "raw IPv4 socket"
	}
	printLat(fmt.Sprintf("UDP ping-pong %s %v <-> %s %v, %d-byte datagrams, %d round trips, busy-polled recvmsg on a %s",
		flag.Arg(0), aAddr, flag.Arg(2), bAddr, *size, *n, how), lat, sendDur)
	return nil
}

// printLat prints what, then half the round trips' figures and the send's.
func printLat(what string, lat, sendDur []time.Duration) {
	slices.Sort(lat)
	var sum time.Duration
	for _, d := range lat {
		sum += d
	}
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	fmt.Printf("%s; half round trip:\n", what)
	slices.Sort(sendDur)
	fmt.Printf("t_min %.2f us, t_typical %.2f us, t_avg %.2f us, p99 %.2f us; the send system call %.2f us typical\n",
		us(lat[0]), us(lat[len(lat)/2]), us(sum/time.Duration(len(lat))), us(lat[len(lat)*99/100]), us(sendDur[len(sendDur)/2]))
}

// end is one side: it sends on tx (a UDP socket) and receives on rx (the
// same socket, with -raw a raw IPv4 socket, with -ring a packet socket
// whose RX ring is rx).
type end struct {
	tx, rx int
	ring   *rxRing
}

func (e end) close() {
	unix.Close(e.tx)
	if e.rx != e.tx {
		unix.Close(e.rx)
	}
	if e.ring != nil {
		unix.Munmap(e.ring.mem)
	}
}

func (e end) spinRecv(buf []byte, deadline time.Time) (int, error) {
	if e.ring != nil {
		return e.ring.spinRecv(buf, deadline)
	}
	return spinRecv(e.rx, buf, deadline)
}

// openIn opens a non-blocking UDP socket bound to addr:port inside network
// namespace ns (an `ip netns` name), and with raw a raw IPv4 socket for UDP
// bound to addr. The sockets keep their namespace; the thread that entered
// ns exits with its goroutine (locked, never unlocked).
func openIn(ns string, addr netip.Addr, port int, raw, ring bool) (end, error) {
	type res struct {
		e   end
		err error
	}
	c := make(chan res, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		e, err := func() (end, error) {
			nsfd, err := unix.Open("/var/run/netns/"+ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				return end{}, fmt.Errorf("netns %s: %w", ns, err)
			}
			defer unix.Close(nsfd)
			if err := unix.Setns(nsfd, unix.CLONE_NEWNET); err != nil {
				return end{}, fmt.Errorf("setns %s: %w", ns, err)
			}
			fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				return end{}, err
			}
			if err := unix.Bind(fd, &unix.SockaddrInet4{Port: port, Addr: addr.As4()}); err != nil {
				unix.Close(fd)
				return end{}, fmt.Errorf("bind %v:%d in %s: %w", addr, port, ns, err)
			}
			if !raw {
				return end{tx: fd, rx: fd}, nil
			}
			// As goroce's holder: UDP_GRO, so that a GSO skb is not
			// segmented only for the filter to drop the segments.
			_ = unix.SetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_GRO, 1)
			drop := []unix.SockFilter{{Code: unix.BPF_RET | unix.BPF_K, K: 0}}
			if err := unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER,
				&unix.SockFprog{Len: 1, Filter: &drop[0]}); err != nil {
				unix.Close(fd)
				return end{}, err
			}
			if ring {
				r, err := openRing(addr, port)
				if err != nil {
					unix.Close(fd)
					return end{}, err
				}
				return end{tx: fd, rx: r.fd, ring: r}, nil
			}
			rfd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
			if err != nil {
				unix.Close(fd)
				return end{}, err
			}
			if err := unix.Bind(rfd, &unix.SockaddrInet4{Addr: addr.As4()}); err != nil {
				unix.Close(fd)
				unix.Close(rfd)
				return end{}, err
			}
			return end{tx: fd, rx: rfd}, nil
		}()
		c <- res{e, err}
	}()
	r := <-c
	return r.e, r.err
}

// send sends msg to to: with gso > 1 as one UDP GSO super-datagram of
// segments of size bytes (UDP_SEGMENT), else as one datagram.
func send(fd int, msg []byte, size, gso int, to *unix.SockaddrInet4) error {
	var sa unix.Sockaddr
	if to != nil {
		sa = to
	}
	if gso <= 1 {
		if err := unix.Sendto(fd, msg, 0, sa); err != nil {
			return fmt.Errorf("sendto: %w", err)
		}
		return nil
	}
	oob := make([]byte, unix.CmsgSpace(2))
	h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
	h.Level, h.Type = unix.IPPROTO_UDP, unix.UDP_SEGMENT
	h.SetLen(unix.CmsgLen(2))
	binary.NativeEndian.PutUint16(oob[unix.CmsgLen(0):], uint16(size))
	if err := unix.Sendmsg(fd, msg, oob, sa, 0); err != nil {
		return fmt.Errorf("sendmsg (UDP_SEGMENT %d): %w", size, err)
	}
	return nil
}

// spinRecv polls fd with non-blocking recvmsg until a datagram arrives.
func spinRecv(fd int, buf []byte, deadline time.Time) (int, error) {
	for spins := 0; ; spins++ {
		k, _, err := unix.Recvfrom(fd, buf, 0)
		if err == nil {
			return k, nil
		}
		if err != unix.EAGAIN && err != unix.EINTR {
			return 0, fmt.Errorf("recvfrom: %w", err)
		}
		if spins&4095 == 4095 && time.Now().After(deadline) {
			return 0, errors.New("timed out")
		}
	}
}
