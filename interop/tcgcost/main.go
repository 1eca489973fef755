// Command tcgcost measures, in the machine it runs on, what one 64 KiB RDMA
// message costs per operation: a Go copy (goroce's MR <-> frame copies),
// goroce's ICRC (wire.Finish over 16 RoCEv2 packets of 4 KiB, whichever CRC
// implementation wire picked at start-up, named in the row; GOROCE_CRC
// forces one), hash/crc32 with the CPU's
// carry-less multiply, and the kernel's copy of a 64 KiB datagram into and
// out of a socket (an AF_UNIX socketpair: one send, one receive). It exists
// for the TCG guest of bench-vs-rxe.sh, where instruction costs differ from
// hardware's; interop/bench-vs-rxe.sh copies it into the guest share:
//
//	/mnt/host/tcgcost
//
// A second list gives what single operations of goroce's per-packet path
// cost, in ns: a function call, an interface call, an atomic add, a mutex,
// a clock read, and wire.Finish / wire.Decode of a 2-byte SEND. Under TCG
// these, not the bytes, decide send_lat (docs/performance.md, session 10).
//
// Each figure is the best of 7 rounds of 200 ms, the rounds interleaved so
// that a noisy moment hits every operation alike.
package main

import (
	"fmt"
	"hash/crc32"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/wire"
)

const msg = 64 << 10

type op struct {
	name string
	f    func() error
	per  int     // operations per call of f (0: f is one 64 KiB message)
	best float64 // µs per call of f
}

//go:noinline
func leaf(x int) int { return x + 1 }

type adder interface{ add(int) int }

type one struct{}

//go:noinline
func (one) add(x int) int { return x + 1 }

// ifc is a package variable so that the compiler cannot devirtualize.
var ifc adder = one{}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "tcgcost:", err)
		os.Exit(1)
	}
}

func run() error {
	src, dst := make([]byte, msg), make([]byte, msg)
	for i := range src {
		src[i] = byte(i * 7)
	}
	// 16 RoCEv2/IPv4 frames of 4096 payload bytes, finished (headers and
	// ICRC) in place as the requester does before a send.
	const pmtu = 4096
	a := wire.Addr{Kind: wire.KindRoCEv2IPv4, SrcIP: netip.MustParseAddr("10.98.0.1"), DstIP: netip.MustParseAddr("10.98.0.2")}
	hr := a.Headroom(wire.FramingIP)
	frame := make([]byte, hr+bth.HeaderLen+pmtu+wire.ICRCLen)
	bthv := bth.Header(frame[hr : hr+bth.HeaderLen])
	bthv.SetOpcode(bth.OpRCRDMAWriteMiddle)
	var sink uint32
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_DGRAM, 0)
	if err != nil {
		return err
	}
	defer syscall.Close(fds[0])
	defer syscall.Close(fds[1])
	for _, fd := range fds {
		for _, o := range []int{syscall.SO_SNDBUF, syscall.SO_RCVBUF} {
			if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, o, 1<<20); err != nil {
				return err
			}
		}
	}
	ops := []*op{
		{name: "Go copy (memmove)", f: func() error { copy(dst, src); return nil }},
		{name: "goroce ICRC (wire.Finish x16, " + wire.CRCImplementation() + ")", f: func() error {
			for i := 0; i < msg/pmtu; i++ {
				if _, err := wire.Finish(frame, hr, bth.HeaderLen+pmtu, wire.FramingIP, &a); err != nil {
					return err
				}
			}
			return nil
		}},
		{name: "hash/crc32 (CPU's CLMUL)", f: func() error { sink += crc32.ChecksumIEEE(src); return nil }},
		{name: "kernel copy in + out (socket)", f: func() error {
			if _, err := syscall.Write(fds[0], src); err != nil {
				return err
			}
			_, err := syscall.Read(fds[1], dst)
			return err
		}},
		{name: "system calls alone (64 B)", f: func() error {
			if _, err := syscall.Write(fds[0], src[:64]); err != nil {
				return err
			}
			_, err := syscall.Read(fds[1], dst)
			return err
		}},
	}
	// Per-operation costs: each f runs batch operations.
	const batch = 1000
	var (
		x    int
		cnt  atomic.Uint64
		mu   sync.Mutex
		when time.Time
		pkt  wire.Packet
	)
	small := make([]byte, hr+bth.HeaderLen+2+2+wire.ICRCLen) // 2-byte SEND ONLY, 2 pad bytes
	sb := bth.Header(small[hr : hr+bth.HeaderLen])
	sb.SetOpcode(bth.OpRCSendOnly)
	sb.SetPadCnt(2)
	sframe, err := wire.Finish(small, hr, bth.HeaderLen+4, wire.FramingIP, &a)
	if err != nil {
		return err
	}
	if err := pkt.Decode(sframe, wire.FramingIP); err != nil {
		return fmt.Errorf("decode of the 2-byte SEND: %w", err)
	}
	ops = append(ops,
		&op{name: "function call + return", per: batch, f: func() error {
			for range batch {
				x = leaf(x)
			}
			return nil
		}},
		&op{name: "interface method call", per: batch, f: func() error {
			for range batch {
				x = ifc.add(x)
			}
			return nil
		}},
		&op{name: "atomic add", per: batch, f: func() error {
			for range batch {
				cnt.Add(1)
			}
			return nil
		}},
		&op{name: "mutex lock + unlock", per: batch, f: func() error {
			for range batch {
				mu.Lock()
				mu.Unlock()
			}
			return nil
		}},
		&op{name: "clock read (time.Now)", per: batch, f: func() error {
			for range batch {
				when = time.Now()
			}
			return nil
		}},
		&op{name: "wire.Finish, 2-byte SEND", per: batch, f: func() error {
			for range batch {
				if _, err := wire.Finish(small, hr, bth.HeaderLen+4, wire.FramingIP, &a); err != nil {
					return err
				}
			}
			return nil
		}},
		&op{name: "wire.Decode + ICRC, 2-byte SEND", per: batch, f: func() error {
			for range batch {
				if err := pkt.Decode(sframe, wire.FramingIP); err != nil {
					return err
				}
				sink += wire.ICRC(sframe, &pkt)
			}
			return nil
		}},
	)
	for _, o := range ops {
		o.best = 1e18
	}
	for range 7 {
		for _, o := range ops {
			n, t0 := 0, time.Now()
			for time.Since(t0) < 200*time.Millisecond {
				if err := o.f(); err != nil {
					return fmt.Errorf("%s: %w", o.name, err)
				}
				n++
			}
			if us := float64(time.Since(t0).Nanoseconds()) / 1e3 / float64(n); us < o.best {
				o.best = us
			}
		}
	}
	for _, o := range ops {
		if o.per == 0 {
			fmt.Printf("%-40s %9.1f us per 64 KiB\n", o.name, o.best)
		} else {
			fmt.Printf("%-40s %9.1f ns each\n", o.name, o.best*1e3/float64(o.per))
		}
	}
	_, _ = sink, when
	return nil
}
