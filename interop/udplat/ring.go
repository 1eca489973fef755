package main

import (
	"errors"
	"fmt"
	"net/netip"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// rxRing is a TPACKET_V2 PACKET_RX_RING of a SOCK_DGRAM packet socket for
// IPv4 (the slot holds the IP packet), bound to one interface, ignoring
// outgoing packets, with a filter for UDP to one port.
type rxRing struct {
	fd        int
	mem       []byte
	frameSize int
	frames    int
	cur       int
}

const (
	ringFrameSize = 2048
	ringBlockSize = 1 << 16
	ringBlocks    = 16
)

// openRing opens the ring on the interface that holds addr.
func openRing(addr netip.Addr, port int) (*rxRing, error) {
	ifc, err := ifaceOf(addr)
	if err != nil {
		return nil, err
	}
	ifindex := ifc.Index
	proto := int(htons(unix.ETH_P_IP))
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, proto)
	if err != nil {
		return nil, err
	}
	fail := func(what string, err error) (*rxRing, error) {
		unix.Close(fd)
		return nil, fmt.Errorf("packet socket: %s: %w", what, err)
	}
	// The filter sees the packet from its IP header (SOCK_DGRAM): UDP
	// (byte 9 = 17) to port (bytes 22-23, no IP options).
	filter := []unix.SockFilter{
		{Code: unix.BPF_LD | unix.BPF_B | unix.BPF_ABS, K: 9},
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: unix.IPPROTO_UDP, Jf: 3},
		{Code: unix.BPF_LD | unix.BPF_H | unix.BPF_ABS, K: 22},
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: uint32(port), Jf: 1},
		{Code: unix.BPF_RET | unix.BPF_K, K: 0xFFFF},
		{Code: unix.BPF_RET | unix.BPF_K, K: 0},
	}
	if err := unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER,
		&unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}); err != nil {
		return fail("filter", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1); err != nil {
		return fail("PACKET_IGNORE_OUTGOING", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_VERSION, unix.TPACKET_V2); err != nil {
		return fail("TPACKET_V2", err)
	}
	req := unix.TpacketReq{Block_size: ringBlockSize, Block_nr: ringBlocks,
		Frame_size: ringFrameSize, Frame_nr: ringBlockSize / ringFrameSize * ringBlocks}
	if err := unix.SetsockoptTpacketReq(fd, unix.SOL_PACKET, unix.PACKET_RX_RING, &req); err != nil {
		return fail("PACKET_RX_RING", err)
	}
	mem, err := unix.Mmap(fd, 0, ringBlockSize*ringBlocks, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fail("mmap", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: uint16(proto), Ifindex: ifindex}); err != nil {
		unix.Munmap(mem)
		return fail("bind", err)
	}
	return &rxRing{fd: fd, mem: mem, frameSize: ringFrameSize, frames: int(req.Frame_nr)}, nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// spinRecv spins on the current slot's status word until the kernel hands
// it over, copies the IP packet to buf and returns the slot.
func (r *rxRing) spinRecv(buf []byte, deadline time.Time) (int, error) {
	slot := r.mem[r.cur*r.frameSize : (r.cur+1)*r.frameSize]
	h := (*unix.Tpacket2Hdr)(unsafe.Pointer(&slot[0]))
	status := (*uint32)(unsafe.Pointer(&h.Status))
	for spins := 0; atomic.LoadUint32(status)&unix.TP_STATUS_USER == 0; spins++ {
		if spins&65535 == 65535 && time.Now().After(deadline) {
			return 0, errors.New("timed out")
		}
	}
	n := copy(buf, slot[h.Net:int(h.Net)+int(h.Snaplen)])
	atomic.StoreUint32(status, unix.TP_STATUS_KERNEL)
	r.cur = (r.cur + 1) % r.frames
	return n, nil
}
