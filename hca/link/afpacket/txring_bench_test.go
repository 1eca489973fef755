package afpacket

import (
	"fmt"
	"testing"
	"time"

	"github.com/goroce/goroce/hca/link/linktest"
	"github.com/goroce/goroce/hca/netcfg"
)

// BenchmarkTxRing moves 64 KiB messages (64 RoCE packets of 1024 bytes at
// MTU 1500, or 16 of 4096 at MTU 9000) across a veth pair, written and
// read back by one goroutine, sent through the transmit ring
// (txring=on) or by sendmmsg (txring=off), as UDP GSO super-packets
// (gso=on) or one skb per frame (gso=off). The receiver reads from its
// receive ring. ns/op is one message out and in; kicks/op counts the
// ring's send system calls.
//
// Over a veth the kernel still copies every frame once on the way out
// (dev_forward_skb orphans the ring's pages: skb_copy_ubufs), so the ring
// saves the per-message system call work around the copy, not the copy.
func BenchmarkTxRing(b *testing.B) {
	for _, gso := range []bool{true, false} {
		for _, payload := range []int{1024, 4096} {
			for _, ring := range []bool{true, false} {
				name := fmt.Sprintf("gso=%s/payload=%d/txring=%s", onOff(gso), payload, onOff(ring))
				b.Run(name, func(b *testing.B) { benchTxRing(b, gso, ring, payload) })
			}
		}
	}
}

func onOff(v bool) string {
	if v {
		return "on"
	}
	return "off"
}

func benchTxRing(b *testing.B, gso, ring bool, payload int) {
	mtu := 1500
	if payload > 1400 {
		mtu = 9000
	}
	ea, eb, _ := openPairCfg(b, netcfg.TwoHostsOptions{MTU: mtu}, Config{NoGSO: !gso, NoTxRing: !ring})
	if ring {
		needTxRing(b, ea)
	}
	frames := batch(b, ea, eb, 65536/payload, payload)
	bufs := make([][]byte, ea.BatchSize())
	for i := range bufs {
		bufs[i] = make([]byte, mtu+ethHdr)
	}
	sizes := make([]int, len(bufs))
	wd := linktest.NewWatchdog(time.Minute, eb) // a lost frame fails the benchmark
	defer wd.Stop()
	roundTrip(b, wd, ea, eb, frames, bufs, sizes) // probe GSO, set up buffers
	before := ea.Stats()
	b.SetBytes(int64(len(frames) * payload))
	b.ReportAllocs()
	for b.Loop() {
		roundTrip(b, wd, ea, eb, frames, bufs, sizes)
	}
	st := ea.Stats()
	b.ReportMetric(float64(st.TxRingKicks-before.TxRingKicks)/float64(b.N), "kicks/op")
	if gso && !ea.GSO() {
		b.Skip("kernel refuses UDP_L4 super-packets from packet sockets (Linux 6.2+)")
	}
	if ring && st.TxRingFrames == before.TxRingFrames {
		b.Fatalf("nothing through the ring: %+v", st)
	}
	if !ring && st.TxRingFrames != 0 {
		b.Fatalf("ring used with NoTxRing: %+v", st)
	}
}
