package udp

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Classic BPF programs. A raw IPv4 socket's filter sees the packet from the
// IPv4 header on.

func dropAll() []unix.SockFilter {
	return []unix.SockFilter{{Code: unix.BPF_RET | unix.BPF_K, K: 0}}
}

// acceptUDPTo accepts IPv4 UDP packets to addr:port and drops the rest:
// the one-queue case of acceptUDPToQP.
func acceptUDPTo(addr [4]byte, port uint16) []unix.SockFilter {
	return acceptUDPToQP(addr, port, 1, 0)
}

// acceptUDPToQP accepts IPv4 UDP packets to addr:port (first fragments or
// whole datagrams) whose BTH DestQP mod n is i, and drops the rest. Packets too short to carry a BTH are accepted by
// residue 0 only, so that exactly one reader sees (and counts) them.
func acceptUDPToQP(addr [4]byte, port uint16, n, i uint32) []unix.SockFilter {
	ip := uint32(addr[0])<<24 | uint32(addr[1])<<16 | uint32(addr[2])<<8 | uint32(addr[3])
	const (
		ldB  = unix.BPF_LD | unix.BPF_B | unix.BPF_ABS
		ldH  = unix.BPF_LD | unix.BPF_H | unix.BPF_ABS
		ldW  = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		ldHI = unix.BPF_LD | unix.BPF_H | unix.BPF_IND
		ldWI = unix.BPF_LD | unix.BPF_W | unix.BPF_IND
		ldL  = unix.BPF_LD | unix.BPF_W | unix.BPF_LEN
		ldxM = unix.BPF_LDX | unix.BPF_B | unix.BPF_MSH
		subX = unix.BPF_ALU | unix.BPF_SUB | unix.BPF_X
		andK = unix.BPF_ALU | unix.BPF_AND | unix.BPF_K
		modK = unix.BPF_ALU | unix.BPF_MOD | unix.BPF_K
		jeq  = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		jge  = unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K
		jset = unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K
		ret  = unix.BPF_RET | unix.BPF_K
	)
	short := uint32(0)
	if i == 0 {
		short = 0xFFFFFFFF
	}
	// Jump offsets count from the next instruction: 17 is "accept",
	// 18 is "drop", 16 is "too short".
	return []unix.SockFilter{
		/* 0 */ {Code: ldB, K: 9}, // protocol
		/* 1 */ {Code: jeq, K: unix.IPPROTO_UDP, Jt: 0, Jf: 16},
		/* 2 */ {Code: ldW, K: 16}, // destination address
		/* 3 */ {Code: jeq, K: ip, Jt: 0, Jf: 14},
		/* 4 */ {Code: ldH, K: 6}, // flags + fragment offset
		/* 5 */ {Code: jset, K: 0x1FFF, Jt: 12, Jf: 0}, // not the first fragment
		/* 6 */ {Code: ldxM, K: 0}, // X = IHL*4
		/* 7 */ {Code: ldHI, K: 2}, // UDP destination port
		/* 8 */ {Code: jeq, K: uint32(port), Jt: 0, Jf: 9},
		/* 9 */ {Code: ldL}, // A = packet length
		/* 10 */ {Code: subX}, // A = length after the IP header
		/* 11 */ {Code: jge, K: udpHdr + 8, Jt: 0, Jf: 4}, // UDP header + BTH through DestQP
		/* 12 */ {Code: ldWI, K: udpHdr + 4}, // BTH bytes 4..7: resv8, DestQP
		/* 13 */ {Code: andK, K: 0xFFFFFF},
		/* 14 */ {Code: modK, K: n},
		/* 15 */ {Code: jeq, K: i, Jt: 1, Jf: 2},
		/* 16 */ {Code: ret, K: short},
		/* 17 */ {Code: ret, K: 0xFFFFFFFF},
		/* 18 */ {Code: ret, K: 0},
	}
}

func attachFilter(fd int, prog []unix.SockFilter) error {
	p := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if err := unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &p); err != nil {
		return fmt.Errorf("udp: SO_ATTACH_FILTER: %w", err)
	}
	return nil
}

// mmsgNow calls sendmmsg or recvmmsg (trap) on fd with MSG_DONTWAIT,
// without allocating and without telling the Go scheduler: a call that
// cannot sleep needs no entersyscall. With it, the runtime's sysmon sees
// the P "in a system call", wakes every 20 µs for as long as such calls
// keep coming and hands the P to another thread each time one lasts past
// a tick: a futex wake and two context switches that a busy link paid
// per send. Under TCG, where a sendmmsg of one 64 KiB message takes a few
// hundred µs (the peer's receive runs inline in it), sysmon's nanosleep
// alone was 6 % of a write_bw sender's CPU (perf, docs/performance.md,
// session 7).
func mmsgNow(trap uintptr, fd uintptr, msgs []unix.Mmsghdr) (int, unix.Errno) {
	n, _, errno := unix.RawSyscall6(trap, fd, uintptr(unsafe.Pointer(&msgs[0])), uintptr(len(msgs)), unix.MSG_DONTWAIT, 0, 0)
	return int(n), errno
}

// mmsg calls sendmmsg or recvmmsg (trap) on fd without allocating; the
// call may block (the ceiling blast's sockets are blocking).
func mmsg(trap uintptr, fd uintptr, msgs []unix.Mmsghdr, flags int) (int, unix.Errno) {
	n, _, errno := unix.Syscall6(trap, fd, uintptr(unsafe.Pointer(&msgs[0])), uintptr(len(msgs)), uintptr(flags), 0, 0)
	return int(n), errno
}
