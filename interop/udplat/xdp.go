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
	"unsafe"

	"golang.org/x/sys/unix"
)

// xsk is one AF_XDP socket in copy mode on queue 0 of an interface, with
// an XDP program that redirects IPv4 UDP to one port into it and passes
// everything else. Frames 0..xskFrames/2-1 of the UMEM belong to the fill
// ring, the rest to transmit. It exists to measure the floor of a path that
// skips the IP and UDP layers on both sides (-xdp).
type xsk struct {
	fd, mapFD, progFD, linkFD int
	umem                      []byte
	rx, tx, fill, comp        xskRing
	txFree                    []uint64
	mac                       net.HardwareAddr
	ifindex                   int
}

// xskRing is one mapped ring: producer and consumer indexes and descs.
type xskRing struct {
	mem        []byte
	prod, cons *uint32
	flags      *uint32
	desc       unsafe.Pointer
	mask       uint32
}

const (
	xskFrames    = 64
	xskFrameSize = 4096
	xskRingSize  = 32
)

func bpfSys(cmd uintptr, attr unsafe.Pointer, size uintptr) (int, error) {
	r, _, e := unix.Syscall(unix.SYS_BPF, cmd, uintptr(attr), size)
	if e != 0 {
		return -1, e
	}
	return int(r), nil
}

// xdpProg is: if the frame is Ethernet/IPv4 (no options)/UDP to port,
// return bpf_redirect_map(map, ctx->rx_queue_index, XDP_PASS); else
// XDP_PASS.
func xdpProg(mapFD, port int) []uint64 {
	ins := func(code uint8, dst, src uint8, off int16, imm int32) uint64 {
		return uint64(code) | uint64(dst|src<<4)<<8 | uint64(uint16(off))<<16 | uint64(uint32(imm))<<32
	}
	le16 := func(v uint16) int32 { return int32(v>>8 | v<<8) }
	const (
		ldxw, ldxh, ldxb = 0x61, 0x69, 0x71
		mov64r, mov64i   = 0xbf, 0xb7
		add64i           = 0x07
		jgtr, jnei       = 0x2d, 0x55
		ldimm64          = 0x18
		call, exit       = 0x85, 0x95
	)
	p := []uint64{
		ins(ldxw, 2, 1, 0, 0),                  // 0: r2 = ctx->data
		ins(ldxw, 3, 1, 4, 0),                  // 1: r3 = ctx->data_end
		ins(mov64r, 4, 2, 0, 0),                // 2: r4 = r2
		ins(add64i, 4, 0, 0, 38),               // 3: r4 += 38
		ins(jgtr, 4, 3, 14, 0),                 // 4: if r4 > r3 goto pass (19)
		ins(ldxh, 5, 2, 12, 0),                 // 5: r5 = ethertype
		ins(jnei, 5, 0, 12, le16(0x0800)),      // 6
		ins(ldxb, 5, 2, 14, 0),                 // 7: version/IHL
		ins(jnei, 5, 0, 10, 0x45),              // 8
		ins(ldxb, 5, 2, 23, 0),                 // 9: protocol
		ins(jnei, 5, 0, 8, unix.IPPROTO_UDP),   // 10
		ins(ldxh, 5, 2, 36, 0),                 // 11: UDP destination port
		ins(jnei, 5, 0, 6, le16(uint16(port))), // 12
		ins(ldxw, 2, 1, 16, 0),                 // 13: r2 = ctx->rx_queue_index
		ins(ldimm64, 1, 1, 0, int32(mapFD)),    // 14: r1 = map (BPF_PSEUDO_MAP_FD)
		0,                                      // 15: (second half of ldimm64)
		ins(mov64i, 3, 0, 0, 2),                // 16: r3 = XDP_PASS
		ins(call, 0, 0, 0, 51),                 // 17: bpf_redirect_map
		ins(exit, 0, 0, 0, 0),                  // 18
		ins(mov64i, 0, 0, 0, 2),                // 19: pass: r0 = XDP_PASS
		ins(exit, 0, 0, 0, 0),                  // 20
	}
	return p
}

// openXSK opens the socket on the interface that holds addr (the calling
// thread's network namespace) and attaches the program (mode: the
// XDP_FLAGS_* of the attachment, 0 for the driver's if it has one).
func openXSK(addr netip.Addr, port int, mode uint32) (*xsk, error) {
	ifc, err := ifaceOf(addr)
	if err != nil {
		return nil, err
	}
	x := &xsk{fd: -1, mapFD: -1, progFD: -1, linkFD: -1, mac: ifc.HardwareAddr, ifindex: ifc.Index}
	fail := func(what string, err error) (*xsk, error) {
		x.close()
		return nil, fmt.Errorf("AF_XDP on %s: %s: %w", ifc.Name, what, err)
	}
	// The XSKMAP: one entry, queue 0.
	var mattr [72]byte
	binary.NativeEndian.PutUint32(mattr[0:], unix.BPF_MAP_TYPE_XSKMAP)
	binary.NativeEndian.PutUint32(mattr[4:], 4)
	binary.NativeEndian.PutUint32(mattr[8:], 4)
	binary.NativeEndian.PutUint32(mattr[12:], 1)
	if x.mapFD, err = bpfSys(unix.BPF_MAP_CREATE, unsafe.Pointer(&mattr[0]), unsafe.Sizeof(mattr)); err != nil {
		return fail("BPF_MAP_CREATE", err)
	}
	prog := xdpProg(x.mapFD, port)
	license := []byte("GPL\x00")
	logBuf := make([]byte, 16384)
	var pattr [128]byte
	binary.NativeEndian.PutUint32(pattr[0:], unix.BPF_PROG_TYPE_XDP)
	binary.NativeEndian.PutUint32(pattr[4:], uint32(len(prog)))
	binary.NativeEndian.PutUint64(pattr[8:], uint64(uintptr(unsafe.Pointer(&prog[0]))))
	binary.NativeEndian.PutUint64(pattr[16:], uint64(uintptr(unsafe.Pointer(&license[0]))))
	binary.NativeEndian.PutUint32(pattr[24:], 1)
	binary.NativeEndian.PutUint32(pattr[28:], uint32(len(logBuf)))
	binary.NativeEndian.PutUint64(pattr[32:], uint64(uintptr(unsafe.Pointer(&logBuf[0]))))
	binary.NativeEndian.PutUint32(pattr[68:], unix.BPF_XDP)
	if x.progFD, err = bpfSys(unix.BPF_PROG_LOAD, unsafe.Pointer(&pattr[0]), unsafe.Sizeof(pattr)); err != nil {
		n := 0
		for n < len(logBuf) && logBuf[n] != 0 {
			n++
		}
		return fail("BPF_PROG_LOAD ("+string(logBuf[:n])+")", err)
	}
	// The socket and its UMEM.
	if x.fd, err = unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0); err != nil {
		return fail("socket", err)
	}
	if x.umem, err = unix.Mmap(-1, 0, xskFrames*xskFrameSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS); err != nil {
		return fail("mmap UMEM", err)
	}
	reg := unix.XDPUmemReg{Addr: uint64(uintptr(unsafe.Pointer(&x.umem[0]))), Len: uint64(len(x.umem)), Size: xskFrameSize}
	if _, _, e := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(x.fd), unix.SOL_XDP, unix.XDP_UMEM_REG,
		uintptr(unsafe.Pointer(&reg)), unsafe.Sizeof(reg), 0); e != 0 {
		return fail("XDP_UMEM_REG", e)
	}
	for _, opt := range []int{unix.XDP_UMEM_FILL_RING, unix.XDP_UMEM_COMPLETION_RING, unix.XDP_RX_RING, unix.XDP_TX_RING} {
		if err := unix.SetsockoptInt(x.fd, unix.SOL_XDP, opt, xskRingSize); err != nil {
			return fail("ring size", err)
		}
	}
	var off unix.XDPMmapOffsets
	ol := uint32(unsafe.Sizeof(off))
	if _, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(x.fd), unix.SOL_XDP, unix.XDP_MMAP_OFFSETS,
		uintptr(unsafe.Pointer(&off)), uintptr(unsafe.Pointer(&ol)), 0); e != 0 {
		return fail("XDP_MMAP_OFFSETS", e)
	}
	mapRing := func(r *xskRing, o unix.XDPRingOffset, pgoff int64, descSize uint64) error {
		mem, err := unix.Mmap(x.fd, pgoff, int(o.Desc+xskRingSize*descSize), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
		if err != nil {
			return err
		}
		r.mem = mem
		r.prod = (*uint32)(unsafe.Pointer(&mem[o.Producer]))
		r.cons = (*uint32)(unsafe.Pointer(&mem[o.Consumer]))
		r.flags = (*uint32)(unsafe.Pointer(&mem[o.Flags]))
		r.desc = unsafe.Pointer(&mem[o.Desc])
		r.mask = xskRingSize - 1
		return nil
	}
	if err := mapRing(&x.rx, off.Rx, unix.XDP_PGOFF_RX_RING, 16); err != nil {
		return fail("mmap RX ring", err)
	}
	if err := mapRing(&x.tx, off.Tx, unix.XDP_PGOFF_TX_RING, 16); err != nil {
		return fail("mmap TX ring", err)
	}
	if err := mapRing(&x.fill, off.Fr, unix.XDP_UMEM_PGOFF_FILL_RING, 8); err != nil {
		return fail("mmap fill ring", err)
	}
	if err := mapRing(&x.comp, off.Cr, unix.XDP_UMEM_PGOFF_COMPLETION_RING, 8); err != nil {
		return fail("mmap completion ring", err)
	}
	// Hand the first half of the frames to the fill ring.
	for i := uint32(0); i < xskFrames/2 && i < xskRingSize; i++ {
		*(*uint64)(unsafe.Add(x.fill.desc, 8*uintptr(i))) = uint64(i) * xskFrameSize
	}
	atomic.StoreUint32(x.fill.prod, min(xskFrames/2, xskRingSize))
	for i := xskFrames / 2; i < xskFrames; i++ {
		x.txFree = append(x.txFree, uint64(i)*xskFrameSize)
	}
	if err := unix.Bind(x.fd, &unix.SockaddrXDP{Flags: unix.XDP_COPY, Ifindex: uint32(ifc.Index)}); err != nil {
		return fail("bind", err)
	}
	var uattr [32]byte
	key, val := uint32(0), uint32(x.fd)
	binary.NativeEndian.PutUint32(uattr[0:], uint32(x.mapFD))
	binary.NativeEndian.PutUint64(uattr[8:], uint64(uintptr(unsafe.Pointer(&key))))
	binary.NativeEndian.PutUint64(uattr[16:], uint64(uintptr(unsafe.Pointer(&val))))
	if _, err := bpfSys(unix.BPF_MAP_UPDATE_ELEM, unsafe.Pointer(&uattr[0]), unsafe.Sizeof(uattr)); err != nil {
		return fail("BPF_MAP_UPDATE_ELEM", err)
	}
	var lattr [64]byte
	binary.NativeEndian.PutUint32(lattr[0:], uint32(x.progFD))
	binary.NativeEndian.PutUint32(lattr[4:], uint32(ifc.Index))
	binary.NativeEndian.PutUint32(lattr[8:], unix.BPF_XDP)
	binary.NativeEndian.PutUint32(lattr[12:], mode)
	if x.linkFD, err = bpfSys(unix.BPF_LINK_CREATE, unsafe.Pointer(&lattr[0]), unsafe.Sizeof(lattr)); err != nil {
		return fail("BPF_LINK_CREATE", err)
	}
	return x, nil
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

func (x *xsk) close() {
	if x.linkFD >= 0 {
		unix.Close(x.linkFD)
		x.linkFD = -1
	}
	if x.mapFD >= 0 {
		// Drop the map's reference to the socket now, not when the
		// map is freed after an RCU grace period: until then the
		// queue's pool stays taken and a new bind gets EBUSY.
		var dattr [32]byte
		key := uint32(0)
		binary.NativeEndian.PutUint32(dattr[0:], uint32(x.mapFD))
		binary.NativeEndian.PutUint64(dattr[8:], uint64(uintptr(unsafe.Pointer(&key))))
		bpfSys(unix.BPF_MAP_DELETE_ELEM, unsafe.Pointer(&dattr[0]), unsafe.Sizeof(dattr))
	}
	for _, fd := range []int{x.fd, x.progFD, x.mapFD} {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
	for _, r := range []*xskRing{&x.rx, &x.tx, &x.fill, &x.comp} {
		if r.mem != nil {
			unix.Munmap(r.mem)
		}
	}
	if x.umem != nil {
		unix.Munmap(x.umem)
	}
}

// spinRecv spins on the RX ring, copies the frame to buf and gives its
// UMEM frame back to the fill ring.
func (x *xsk) spinRecv(buf []byte, deadline time.Time) (int, error) {
	cons := *x.rx.cons
	for spins := 0; atomic.LoadUint32(x.rx.prod) == cons; spins++ {
		if spins&65535 == 65535 && time.Now().After(deadline) {
			return 0, errors.New("timed out")
		}
	}
	d := (*unix.XDPDesc)(unsafe.Add(x.rx.desc, 16*uintptr(cons&x.rx.mask)))
	n := copy(buf, x.umem[d.Addr:d.Addr+uint64(d.Len)])
	frame := d.Addr &^ (xskFrameSize - 1)
	atomic.StoreUint32(x.rx.cons, cons+1)
	fp := *x.fill.prod
	*(*uint64)(unsafe.Add(x.fill.desc, 8*uintptr(fp&x.fill.mask))) = frame
	atomic.StoreUint32(x.fill.prod, fp+1)
	return n, nil
}

// send copies frame into a free UMEM frame, queues it on the TX ring and
// kicks the kernel, which in copy mode transmits it in the system call.
func (x *xsk) send(frame []byte) error {
	// Reclaim what the kernel has sent.
	cc := *x.comp.cons
	for cp := atomic.LoadUint32(x.comp.prod); cc != cp; cc++ {
		x.txFree = append(x.txFree, *(*uint64)(unsafe.Add(x.comp.desc, 8*uintptr(cc&x.comp.mask))))
	}
	atomic.StoreUint32(x.comp.cons, cc)
	if len(x.txFree) == 0 {
		return errors.New("no free TX frame")
	}
	a := x.txFree[len(x.txFree)-1]
	x.txFree = x.txFree[:len(x.txFree)-1]
	copy(x.umem[a:a+xskFrameSize], frame)
	tp := *x.tx.prod
	d := (*unix.XDPDesc)(unsafe.Add(x.tx.desc, 16*uintptr(tp&x.tx.mask)))
	d.Addr, d.Len, d.Options = a, uint32(len(frame)), 0
	atomic.StoreUint32(x.tx.prod, tp+1)
	if _, _, e := unix.Syscall6(unix.SYS_SENDTO, uintptr(x.fd), 0, 0, unix.MSG_DONTWAIT, 0, 0); e != 0 && e != unix.EAGAIN && e != unix.EBUSY {
		return fmt.Errorf("sendto (kick): %w", e)
	}
	return nil
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
func runXDP(nsA string, aAddr netip.Addr, nsB string, bAddr netip.Addr, port, size, n int, mode uint32, timeout time.Duration) error {
	open := func(ns string, addr netip.Addr) (*xsk, int, error) {
		type res struct {
			x   *xsk
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
			x, err := openXSK(addr, port, mode)
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
	defer xa.close()
	xb, hb, err := open(nsB, bAddr)
	if err != nil {
		return err
	}
	defer unix.Close(hb)
	defer xb.close()
	toB := ethFrame(xa.mac, xb.mac, aAddr, bAddr, port, size)
	toA := ethFrame(xb.mac, xa.mac, bAddr, aAddr, port, size)
	deadline := time.Now().Add(timeout)

	echoErr := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		buf := make([]byte, 2048)
		for i := 0; i < n; i++ {
			k, err := xb.spinRecv(buf, deadline)
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
	buf := make([]byte, 2048)
	lat := make([]time.Duration, 0, n)
	sendDur := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		t0 := time.Now()
		if err := xa.send(toB); err != nil {
			return fmt.Errorf("ping %d: %w", i, err)
		}
		sendDur = append(sendDur, time.Since(t0))
		if _, err := xa.spinRecv(buf, deadline); err != nil {
			return fmt.Errorf("ping %d: %w", i, err)
		}
		lat = append(lat, time.Since(t0)/2)
	}
	if err := <-echoErr; err != nil {
		return err
	}
	printLat(fmt.Sprintf("Ethernet ping-pong %s %v <-> %s %v, %d-byte UDP payloads, %d round trips, AF_XDP (copy mode, XDP flags %#x) send and busy-polled RX ring",
		nsA, aAddr, nsB, bAddr, size, n, mode), lat, sendDur)
	return nil
}
