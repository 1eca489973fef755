package udp

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// BenchmarkUDP measures one flow 127.0.0.1 -> 127.0.0.2 in a fresh
// namespace: one op is a Write of 64 RoCEv2 frames of the given IP packet
// size while a goroutine Reads at the peer. Metrics: frames/s written,
// rx-frames/s and rx-GB/s delivered by Read (ICRC-ready IP packets), and
// the delivered fraction (UDP drops when the reader falls behind). The
// rawudp mode is the baseline: plain datagrams of the same IP size through
// sendmmsg/recvmmsg on ordinary UDP sockets, no RoCE work.
//
//	go test -run '^$' -bench BenchmarkUDP -benchtime 3s ./hca/link/udp
func BenchmarkUDP(b *testing.B) {
	for _, size := range []int{1082, 4154} {
		for _, mode := range []string{"sendmmsg", "gso", "rawudp", "ipv6-gso", "ipv6-gso-gro"} {
			b.Run(fmt.Sprintf("%d/%s", size, mode), func(b *testing.B) {
				ns := newNetNS(b, "fd00::1/128", "fd00::2/128")
				if mode == "rawudp" {
					benchRawUDP(b, ns, size)
					return
				}
				sa, da, hdr := "127.0.0.1", "127.0.0.2", 28
				if strings.HasPrefix(mode, "ipv6") {
					sa, da, hdr = "fd00::1", "fd00::2", 48
				}
				x, y := openPair(b, ns, sa, da, func(c *Config) {
					c.NoGSO = mode == "sendmmsg"
					c.GRO = mode == "ipv6-gso-gro"
				})
				defer x.Close()
				defer y.Close()
				frames := mustFrames(b, x, y, 0, 64, size-hdr-12-4)
				var rxFrames, rxBytes atomic.Int64
				var wg sync.WaitGroup
				wg.Go(func() {
					bufs := make([][]byte, 64)
					for i := range bufs {
						bufs[i] = make([]byte, size+64)
					}
					sizes := make([]int, 64)
					for {
						n, err := y.Read(bufs, sizes, 0)
						if err != nil {
							return
						}
						rxFrames.Add(int64(n))
						rxBytes.Add(int64(n * size))
					}
				})
				b.ReportAllocs()
				b.SetBytes(int64(64 * size))
				for b.Loop() {
					if _, err := x.Write(frames, 0); err != nil {
						b.Fatal(err)
					}
				}
				el := b.Elapsed().Seconds()
				time.Sleep(20 * time.Millisecond) // let the reader drain
				y.Close()
				wg.Wait()
				report(b, el, 64*b.N, rxFrames.Load(), rxBytes.Load())
			})
		}
	}
}

func report(b *testing.B, el float64, sent int, rxFrames, rxBytes int64) {
	b.ReportMetric(float64(sent)/el, "frames/s")
	b.ReportMetric(float64(rxFrames)/el, "rx-frames/s")
	b.ReportMetric(float64(rxBytes)/el/1e9, "rx-GB/s")
	b.ReportMetric(float64(rxFrames)/float64(sent), "delivered")
}

// benchRawUDP is the baseline: the same datagram sizes and batching on
// plain UDP sockets (sendmmsg of 64 / recvmmsg of 64).
func benchRawUDP(b *testing.B, ns *netNS, size int) {
	var tx, rx int
	ns.do(b, func() {
		var err error
		if tx, err = unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0); err != nil {
			b.Fatal(err)
		}
		if rx, err = unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0); err != nil {
			b.Fatal(err)
		}
		setBuffers(tx, 0, DefaultSocketBuffer)
		setBuffers(rx, DefaultSocketBuffer, 0)
		if err := unix.Bind(rx, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 2}, Port: 4791}); err != nil {
			b.Fatal(err)
		}
		if err := unix.Bind(tx, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}, Port: 4791}); err != nil {
			b.Fatal(err)
		}
	})
	defer unix.Close(tx)
	payload := size - 28
	dst := unix.RawSockaddrInet4{Family: unix.AF_INET, Addr: [4]byte{127, 0, 0, 2}}
	*(*[2]byte)(unsafe.Pointer(&dst.Port)) = [2]byte{0x12, 0xB7}
	data := make([]byte, 64*payload)
	msgs := make([]unix.Mmsghdr, 64)
	iovs := make([]unix.Iovec, 64)
	for i := range msgs {
		setIov(&iovs[i], data[i*payload:(i+1)*payload])
		msgs[i].Hdr.Iov = &iovs[i]
		msgs[i].Hdr.SetIovlen(1)
		msgs[i].Hdr.Name = (*byte)(unsafe.Pointer(&dst))
		msgs[i].Hdr.Namelen = unix.SizeofSockaddrInet4
	}
	var stop atomic.Bool
	var rxFrames atomic.Int64
	var wg sync.WaitGroup
	unix.SetsockoptTimeval(rx, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 50000})
	wg.Go(func() {
		rdata := make([]byte, 64*(payload+64))
		rmsgs := make([]unix.Mmsghdr, 64)
		riovs := make([]unix.Iovec, 64)
		for i := range rmsgs {
			setIov(&riovs[i], rdata[i*(payload+64):(i+1)*(payload+64)])
			rmsgs[i].Hdr.Iov = &riovs[i]
			rmsgs[i].Hdr.SetIovlen(1)
		}
		for !stop.Load() {
			n, errno := mmsg(unix.SYS_RECVMMSG, uintptr(rx), rmsgs, 0)
			if errno == 0 {
				rxFrames.Add(int64(n))
			}
		}
	})
	b.ReportAllocs()
	b.SetBytes(int64(64 * size))
	for b.Loop() {
		for sent := 0; sent < 64; {
			n, errno := mmsg(unix.SYS_SENDMMSG, uintptr(tx), msgs[sent:], 0)
			if errno != 0 && errno != unix.EINTR {
				b.Fatal(errno)
			}
			sent += n
		}
	}
	el := b.Elapsed().Seconds()
	time.Sleep(20 * time.Millisecond)
	stop.Store(true)
	wg.Wait()
	unix.Close(rx)
	report(b, el, 64*b.N, rxFrames.Load(), rxFrames.Load()*int64(size))
}
