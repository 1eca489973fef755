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
	return a
}

// BenchmarkWriteRead moves batches of 64 frames across a veth pair
// (sendmmsg on one end, recvmmsg on the other, one goroutine), each frame
// its own skb (gso=off) or runs of them as UDP GSO super-packets that the
// receiving Read splits (gso=on). holder-gro=off leaves UDP_GRO off on the
// receiver's UDP 4791 holder, so its kernel segments every super-packet
// for that socket too.
func BenchmarkWriteRead(b *testing.B) {
	for _, tc := range []struct {
		name         string
		noGSO, noGRO bool
	}{
		{"gso=off", true, false},
		{"gso=on", false, false},
		{"gso=on/holder-gro=off", false, true},
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
				eb, err := Open(Config{Interface: h.B.Ifname, NetNS: h.B.NS})
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
