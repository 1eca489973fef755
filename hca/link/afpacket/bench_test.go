package afpacket

import (
	"fmt"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/hca/link/linktest"
	"github.com/goroce/goroce/hca/netcfg"
)

func batch(t testing.TB, a, b *Endpoint, n, payload int) [][]byte {
	t.Helper()
	frames := make([][]byte, n)
	for i := range frames {
		f, err := linktest.Frame(a, b, bth.PSN(i), payload)
		if err != nil {
			t.Fatal(err)
		}
		frames[i] = f
	}
	return frames
}

// roundTrip writes frames on a and reads as many on b; wd closes b if
// they do not all come.
func roundTrip(t testing.TB, wd *linktest.Watchdog, a, b *Endpoint, frames, bufs [][]byte, sizes []int) {
	if n, err := a.Write(frames, 0); n != len(frames) || err != nil {
		t.Fatalf("Write = %d, %v", n, err)
	}
	for got := 0; got < len(frames); {
		n, err := b.Read(bufs[got:], sizes[got:], 0)
		if err != nil {
			t.Fatal(wd.Err(err, got, len(frames)))
		}
		got += n
	}
}

func TestZeroAllocs(t *testing.T) { zeroAllocRoundTrips(t, 256) }

// zeroAllocRoundTrips checks that a Write of a full batch of frames with
// payload bytes each, and the Reads that receive them, allocate nothing
// after a warm-up round trip; it returns the sending endpoint.
func zeroAllocRoundTrips(t *testing.T, payload int) *Endpoint {
	t.Helper()
	a, b, _ := openPair(t, netcfg.TwoHostsOptions{})
	allocFree(t, a, b, payload)
	return a
}

// allocFree is zeroAllocRoundTrips on an open pair: 52 batches, all
// checked but the first.
func allocFree(t *testing.T, a, b *Endpoint, payload int) {
	t.Helper()
	frames := batch(t, a, b, a.BatchSize(), payload)
	bufs := make([][]byte, len(frames))
	for i := range bufs {
		bufs[i] = make([]byte, 2048)
	}
	sizes := make([]int, len(bufs))
	wd := linktest.NewWatchdog(linktest.Timeout, b)
	defer wd.Stop()
	roundTrip(t, wd, a, b, frames, bufs, sizes) // warm up
	if n := testing.AllocsPerRun(50, func() { roundTrip(t, wd, a, b, frames, bufs, sizes) }); n != 0 {
		t.Fatalf("%v allocations per batch of %d frames", n, len(frames))
	}
}

// BenchmarkWriteRead moves batches of 64 frames across a veth pair
// (sendmmsg on one end, ring or recvmmsg on the other, one goroutine), each frame
// its own skb (gso=off) or runs of them as UDP GSO super-packets that the
// receiving Read splits (gso=on). holder-gro=off leaves UDP_GRO off on the
// receiver's UDP 4791 holder, so its kernel segments every super-packet
// for that socket too. The receiver reads from its ring (a recvmsg per
// super-packet: TP_STATUS_COPY), or with recvmmsg (ring=off).
func BenchmarkWriteRead(b *testing.B) {
	for _, tc := range []struct {
		name                 string
		noGSO, noGRO, noRing bool
	}{
		{"gso=off", true, false, false},
		{"gso=on", false, false, false},
		{"gso=on/holder-gro=off", false, true, false},
		{"gso=off/ring=off", true, false, true},
		{"gso=on/ring=off", false, false, true},
	} {
		for _, payload := range []int{64, 1024, 4096} {
			b.Run(fmt.Sprintf("%s/payload=%d", tc.name, payload), func(b *testing.B) {
				mtu := 1500
				if payload > 1400 {
					mtu = 9000
				}
				holderNoGRO = tc.noGRO
				h := netcfg.TwoHosts(b, netcfg.TwoHostsOptions{MTU: mtu})
				ea, err := Open(Config{Interface: h.A.Ifname, NetNS: h.A.NS, NoGSO: tc.noGSO})
				if err != nil {
					b.Fatal(err)
				}
				defer ea.Close()
				eb, err := Open(Config{Interface: h.B.Ifname, NetNS: h.B.NS, NoRing: tc.noRing})
				holderNoGRO = false
				if err != nil {
					b.Fatal(err)
				}
				defer eb.Close()
				frames := batch(b, ea, eb, ea.BatchSize(), payload)
				bufs := make([][]byte, len(frames))
				for i := range bufs {
					bufs[i] = make([]byte, 9100)
				}
				sizes := make([]int, len(bufs))
				b.SetBytes(int64(len(frames) * len(frames[0])))
				b.ReportAllocs()
				wd := linktest.NewWatchdog(time.Minute, eb) // a lost frame fails the benchmark
				defer wd.Stop()
				for b.Loop() {
					roundTrip(b, wd, ea, eb, frames, bufs, sizes)
				}
				b.ReportMetric(float64(b.N*len(frames))/b.Elapsed().Seconds(), "frames/s")
				if !tc.noGSO && !ea.GSO() {
					b.Skip("kernel refuses UDP_L4 super-packets from packet sockets (Linux 6.2+)")
				}
				if st := ea.Stats(); (st.TxGSO > 0) == tc.noGSO {
					b.Fatalf("super-packets sent: %d", st.TxGSO)
				}
			})
		}
	}
}

// BenchmarkTryReadEmpty is the busy poller's empty poll: a TryRead that
// finds nothing. On the ring it is a load of one slot's status; without
// it (ring=off) a recvmmsg that returns EAGAIN.
func BenchmarkTryReadEmpty(b *testing.B) {
	for _, noRing := range []bool{false, true} {
		b.Run(ringName(noRing), func(b *testing.B) {
			_, e, _ := openPairCfg(b, netcfg.TwoHostsOptions{}, Config{NoRing: noRing})
			if !noRing {
				needRing(b, e)
			}
			bufs, sizes := [][]byte{make([]byte, 2048)}, []int{0}
			e.TryRead(bufs, sizes, 0) // the first Read sets up the GSO overflow buffers
			b.ReportAllocs()
			for b.Loop() {
				if n, err := e.TryRead(bufs, sizes, 0); n != 0 || err != nil {
					b.Fatalf("TryRead = %d, %v", n, err)
				}
			}
		})
	}
}

func ringName(noRing bool) string {
	if noRing {
		return "ring=off"
	}
	return "ring=on"
}

// BenchmarkPingPong is send_lat -s 2 on the link alone: one frame (a
// 2-byte RC SEND) from A to B across a veth pair between two namespaces,
// and B's answer back, per op; ns/op is the round trip. spin: both sides
// busy-poll with TryRead (hca.Options.BusyPoll), so an empty poll's cost
// is paid over and over while the frame crosses; block: both wait in Read
// (the netpoller). It needs two CPUs for the two spinners.
//
// xdp: both ends with Config.XDP (generic), the frames through AF_XDP
// sockets.
//
// pair: each way an ACK and a 2-byte SEND, what a send_lat turnaround
// sends (the ACK of the message answered, then the answer): over XDP two
// AF_XDP frames (two skbs); through the packet socket one UDP GSO
// super-frame (where the kernel takes UDP_L4 from one), split by the
// receiving Read.
func BenchmarkPingPong(b *testing.B) {
	for _, mode := range []string{"spin", "block"} {
		for _, path := range []struct {
			name string
			cfg  Config
			pair bool
		}{
			{ringName(false), Config{}, false}, {ringName(true), Config{NoRing: true}, false},
			{"xdp", Config{XDP: true}, false},
			{ringName(false) + "/pair", Config{}, true}, {"xdp/pair", Config{XDP: true}, true},
		} {
			b.Run(mode+"/"+path.name, func(b *testing.B) {
				ea, eb, _ := openPairCfg(b, netcfg.TwoHostsOptions{}, path.cfg)
				msg := func(from, to *Endpoint, psn bth.PSN) [][]byte {
					send, err := linktest.Frame(from, to, psn, 2)
					if err != nil {
						b.Fatal(err)
					}
					if !path.pair {
						return [][]byte{send}
					}
					ack, err := linktest.ACK(from, to, 0x12, psn-1)
					if err != nil {
						b.Fatal(err)
					}
					return [][]byte{ack, send}
				}
				ping, pong := msg(ea, eb, 1), msg(eb, ea, 2)
				spin := mode == "spin"
				recv := func(e *Endpoint, bufs [][]byte, sizes []int) error {
					for got := 0; got < len(bufs); {
						var n int
						var err error
						if spin {
							n, err = e.TryRead(bufs[got:], sizes[got:], 0)
						} else {
							n, err = e.Read(bufs[got:], sizes[got:], 0)
						}
						if err != nil {
							return err
						}
						got += n
					}
					return nil
				}
				newBufs := func() ([][]byte, []int) {
					bufs := make([][]byte, len(ping))
					for i := range bufs {
						bufs[i] = make([]byte, 2048)
					}
					return bufs, make([]int, len(bufs))
				}
				bufs, sizes := newBufs()
				// The first Read sets up the GSO overflow buffers.
				ea.TryRead(bufs, sizes, 0)
				eb.TryRead(bufs, sizes, 0)
				done := make(chan error, 1)
				go func() {
					bufs, sizes := newBufs()
					for {
						if err := recv(eb, bufs, sizes); err != nil {
							done <- err
							return
						}
						if _, err := eb.Write(pong, 0); err != nil {
							done <- err
							return
						}
					}
				}()
				wd := linktest.NewWatchdog(time.Minute, ea, eb) // a lost frame fails the benchmark
				defer wd.Stop()
				b.ReportAllocs()
				b.SetBytes(int64(len(ping[0])*len(ping) + len(pong[0])*len(pong)))
				for b.Loop() {
					if _, err := ea.Write(ping, 0); err != nil {
						b.Fatal(err)
					}
					if err := recv(ea, bufs, sizes); err != nil {
						b.Fatal(wd.Err(err, 0, len(bufs)))
					}
				}
				b.StopTimer()
				eb.Close()
				<-done
				st := ea.Stats()
				b.ReportMetric(float64(st.RxSyscalls)/float64(b.N), "rxcalls/op")
			})
		}
	}
}
