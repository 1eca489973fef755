//go:build linux

package tun

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/hca/link/linktest"
)

// BenchmarkTUN measures one direction of the routed two-namespace topology:
// the writer sends 64 KiB messages of RoCEv2 frames (MTU 1024 and 4096
// payloads: 64 or 16 frames, one QP, consecutive PSNs, one Write each) into
// tunA, the kernel forwards them twice, and the reader drains tunB; both
// devices with the default offloads (the message goes as super-packets,
// forwarded whole, split by the reader) or with NoOffload (one write(2)
// and read(2) per frame). An op is one frame; bytes are IP packet bytes;
// loss/op counts frames the kernel dropped (a TUN queue overflows when the
// reader falls behind).
func BenchmarkTUN(b *testing.B) {
	r := newRouted(b, false, 9000)
	for _, payload := range []int{1024, 4096} {
		for _, off := range []bool{true, false} {
			name := "on"
			if !off {
				name = "off"
			}
			b.Run(fmt.Sprintf("payload=%d/offload=%s", payload, name), func(b *testing.B) {
				benchOneWay(b, r, payload, func(c *Config) { c.NoOffload = !off })
			})
		}
	}
}

// window is the benchmark's flow control: frames written and not yet read.
const window = 256

func benchOneWay(b *testing.B, r *routed, payload int, mod func(*Config)) {
	ea, eb := r.open(b, mod)
	batch := min(ea.BatchSize(), 65536/payload)
	frames := make([][]byte, batch)
	for i := range frames {
		f, err := linktest.Frame(ea, eb, bth.PSN(i), payload)
		if err != nil {
			b.Fatal(err)
		}
		frames[i] = f
	}
	bufs := make([][]byte, eb.BatchSize())
	for i := range bufs {
		bufs[i] = make([]byte, 9000)
	}
	sizes := make([]int, len(bufs))
	// The reader hands its totals back over got: testing.B's metrics
	// are not safe to report from another goroutine.
	type totals struct{ frames, reads int }
	got := make(chan totals, 1)
	var recvd atomic.Int64
	credits := make(chan int, 1<<20)
	go func() {
		n := 0
		reads := 0
		for {
			k, err := eb.Read(bufs, sizes, 0)
			if err != nil {
				break
			}
			n += k
			reads++
			recvd.Store(int64(n))
			credits <- k
		}
		got <- totals{n, reads}
	}()
	b.SetBytes(int64(len(frames[0])))
	b.ReportAllocs()
	b.ResetTimer()
	acked := 0
	for sent := 0; sent < b.N; {
		// Keep at most window frames in flight: the kernel queues 500
		// packets for a TUN reader and drops beyond that, as an RC
		// sender's window would prevent.
		for sent-acked > window {
			select {
			case k := <-credits:
				acked += k
			case <-time.After(linktest.Timeout):
				// More than a window lost: never block forever.
				eb.Close()
				b.Fatalf("no frame read for %v: %d sent, %d read", linktest.Timeout, sent, recvd.Load())
			}
		}
		k := min(batch, b.N-sent)
		n, err := ea.Write(frames[:k], 0)
		if err != nil {
			b.Fatal(err)
		}
		sent += n
	}
	// Let the kernel finish forwarding, then stop the reader.
	deadline := time.Now().Add(2 * time.Second)
	for recvd.Load() < int64(b.N) && time.Now().Before(deadline) {
		select {
		case <-credits:
		case <-time.After(10 * time.Millisecond):
		}
	}
	b.StopTimer()
	eb.Close()
	t := <-got
	b.ReportMetric(float64(t.frames)/float64(max(t.reads, 1)), "frames/read")
	b.ReportMetric(float64(b.N-t.frames)/float64(b.N), "loss/op")
	if st := ea.Stats(); st.TxGSO > 0 {
		b.ReportMetric(float64(st.TxGSOSegments)/float64(st.TxGSO), "frames/super-packet")
	}
}
