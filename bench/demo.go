package bench

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"sort"
	"time"

	"github.com/goroce/goroce/hca"
	"github.com/goroce/goroce/transport"
)

// BWResult is one bandwidth measurement.
type BWResult struct {
	Op       string
	Size     int
	Iters    int
	Duration time.Duration
	// BytesPerSec is the payload rate; MsgPerSec the message rate.
	BytesPerSec float64
	MsgPerSec   float64
	// PeakBytesPerSec is the best rate over a tenth of the run (0: not
	// measured, PrintBW shows the average).
	PeakBytesPerSec float64
	// QPs is the number of QPs that shared the traffic (0 means 1);
	// Messages the total completed over all of them (Iters is per QP).
	QPs      int
	Messages int
}

// LatResult is one latency measurement (one-way, half the round trip, as
// perftest's *_lat tools report).
type LatResult struct {
	Op                     string
	Size                   int
	Iters                  int
	Min, Typical, Avg, Max time.Duration
	Stdev                  time.Duration
	P99, P999              time.Duration
	// Samples are the measurements in the order taken, kept for -H and -U
	// (Params.Histogram, Params.Unsorted) only.
	Samples []time.Duration
}

// Check is the outcome of one verified operation of the demo.
type Check struct {
	Name string
	Err  error
}

// RunChecks runs every RC operation once over p with data verification:
// SEND (multi-packet), SEND_WITH_IMM, RDMA WRITE, RDMA_WRITE_WITH_IMM,
// RDMA READ, FETCH_AND_ADD and CMP_AND_SWAP.
func RunChecks(ctx context.Context, p *Pair) []Check {
	a, b := p.A, p.B
	half := len(a.Buf) / 2
	n := min(64<<10, half)
	var out []Check
	add := func(name string, err error) { out = append(out, Check{name, err}) }
	pattern := func(buf []byte, seed byte) {
		for i := range buf {
			buf[i] = seed ^ byte(i*13+i>>8)
		}
	}

	add("SEND 4096 B", func() error {
		pattern(a.Buf[:4096], 1)
		clear(b.Buf[half : half+4096])
		if err := b.QP.PostRecv(&hca.RecvWR{ID: 1, SGL: []hca.SGE{b.MR.SGE(half, 4096)}}); err != nil {
			return err
		}
		if err := a.QP.PostSend(&hca.SendWR{ID: 1, Opcode: transport.WRSend, Flags: transport.SendSignaled, SGL: []hca.SGE{a.MR.SGE(0, 4096)}}); err != nil {
			return err
		}
		if _, err := expectWC(ctx, a.CQ, transport.WCSend, "send"); err != nil {
			return err
		}
		wc, err := expectWC(ctx, b.CQ, transport.WCRecv, "receive")
		if err != nil {
			return err
		}
		if wc.ByteLen != 4096 || !bytes.Equal(b.Buf[half:half+4096], a.Buf[:4096]) {
			return fmt.Errorf("received %d bytes, data differs", wc.ByteLen)
		}
		return nil
	}())

	add("SEND_WITH_IMM 64 B", func() error {
		pattern(a.Buf[:64], 2)
		if err := b.QP.PostRecv(&hca.RecvWR{ID: 2, SGL: []hca.SGE{b.MR.SGE(half, 64)}}); err != nil {
			return err
		}
		if err := a.QP.PostSend(&hca.SendWR{ID: 2, Opcode: transport.WRSendWithImm, Imm: 0x12345678, Flags: transport.SendSignaled, SGL: []hca.SGE{a.MR.SGE(0, 64)}}); err != nil {
			return err
		}
		if _, err := expectWC(ctx, a.CQ, transport.WCSend, "send"); err != nil {
			return err
		}
		wc, err := expectWC(ctx, b.CQ, transport.WCRecv, "receive")
		if err != nil {
			return err
		}
		if wc.Flags&transport.WCWithImm == 0 || wc.Imm != 0x12345678 || !bytes.Equal(b.Buf[half:half+64], a.Buf[:64]) {
			return fmt.Errorf("imm %#x flags %#x or data differs", wc.Imm, wc.Flags)
		}
		return nil
	}())

	add(fmt.Sprintf("RDMA_WRITE %d B", n), func() error {
		pattern(a.Buf[:n], 3)
		clear(b.Buf[:n])
		if err := a.QP.PostSend(&hca.SendWR{ID: 3, Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
			SGL: []hca.SGE{a.MR.SGE(0, n)}, RemoteAddr: b.MR.Addr(), RKey: b.MR.RKey()}); err != nil {
			return err
		}
		if _, err := expectWC(ctx, a.CQ, transport.WCRDMAWrite, "write"); err != nil {
			return err
		}
		if !bytes.Equal(readMR(b, 0, n), a.Buf[:n]) {
			return fmt.Errorf("target memory differs")
		}
		return nil
	}())

	add("RDMA_WRITE_WITH_IMM 1000 B", func() error {
		pattern(a.Buf[:1000], 4)
		if err := b.QP.PostRecv(&hca.RecvWR{ID: 4}); err != nil {
			return err
		}
		if err := a.QP.PostSend(&hca.SendWR{ID: 4, Opcode: transport.WRRDMAWriteWithImm, Imm: 0xcafe, Flags: transport.SendSignaled,
			SGL: []hca.SGE{a.MR.SGE(0, 1000)}, RemoteAddr: b.MR.Addr() + 8, RKey: b.MR.RKey()}); err != nil {
			return err
		}
		if _, err := expectWC(ctx, a.CQ, transport.WCRDMAWrite, "write"); err != nil {
			return err
		}
		wc, err := expectWC(ctx, b.CQ, transport.WCRecvRDMAWithImm, "receive")
		if err != nil {
			return err
		}
		if wc.Imm != 0xcafe || wc.ByteLen != 1000 || !bytes.Equal(b.Buf[8:1008], a.Buf[:1000]) {
			return fmt.Errorf("imm %#x len %d or data differs", wc.Imm, wc.ByteLen)
		}
		return nil
	}())

	add(fmt.Sprintf("RDMA_READ %d B", n), func() error {
		pattern(b.Buf[half:half+n], 5)
		b.QP.Stats() // publish: B's HCA reads this memory under B's QP lock
		clear(a.Buf[half : half+n])
		if err := a.QP.PostSend(&hca.SendWR{ID: 5, Opcode: transport.WRRDMARead, Flags: transport.SendSignaled,
			SGL: []hca.SGE{a.MR.SGE(half, n)}, RemoteAddr: b.MR.Addr() + uint64(half), RKey: b.MR.RKey()}); err != nil {
			return err
		}
		if _, err := expectWC(ctx, a.CQ, transport.WCRDMARead, "read"); err != nil {
			return err
		}
		if !bytes.Equal(a.Buf[half:half+n], b.Buf[half:half+n]) {
			return fmt.Errorf("read data differs")
		}
		return nil
	}())

	add("ATOMIC_FETCH_AND_ADD", func() error {
		binary.NativeEndian.PutUint64(b.Buf[64:], 1000)
		b.QP.Stats() // publish, as above
		if err := a.QP.PostSend(&hca.SendWR{ID: 6, Opcode: transport.WRAtomicFetchAndAdd, Flags: transport.SendSignaled,
			SGL: []hca.SGE{a.MR.SGE(128, 8)}, RemoteAddr: b.MR.Addr() + 64, RKey: b.MR.RKey(), CompareAdd: 42}); err != nil {
			return err
		}
		if _, err := expectWC(ctx, a.CQ, transport.WCFetchAdd, "fetch-add"); err != nil {
			return err
		}
		if got, now := binary.NativeEndian.Uint64(a.Buf[128:]), binary.NativeEndian.Uint64(append(readMR(b, 64, 8), make([]byte, 8)...)); got != 1000 || now != 1042 {
			return fmt.Errorf("returned %d (want 1000), target %d (want 1042)", got, now)
		}
		return nil
	}())

	add("ATOMIC_CMP_AND_SWP", func() error {
		if err := a.QP.PostSend(&hca.SendWR{ID: 7, Opcode: transport.WRAtomicCmpAndSwp, Flags: transport.SendSignaled,
			SGL: []hca.SGE{a.MR.SGE(136, 8)}, RemoteAddr: b.MR.Addr() + 64, RKey: b.MR.RKey(), CompareAdd: 1042, Swap: 7}); err != nil {
			return err
		}
		if _, err := expectWC(ctx, a.CQ, transport.WCCompSwap, "cmp-swap"); err != nil {
			return err
		}
		if got, now := binary.NativeEndian.Uint64(a.Buf[136:]), binary.NativeEndian.Uint64(append(readMR(b, 64, 8), make([]byte, 8)...)); got != 1042 || now != 7 {
			return fmt.Errorf("returned %d (want 1042), target %d (want 7)", got, now)
		}
		return nil
	}())
	return out
}

// readMR reads s's registered memory under s's QP lock. Memory that s's
// HCA wrote for the peer's RDMA WRITE or atomic is ordered with this
// goroutine by no completion of s's own, so it must be read this way.
func readMR(s *Side, off, n int) []byte {
	b := make([]byte, n)
	if err := s.QP.ReadMR(s.MR, off, b); err != nil {
		return nil // fails the comparison that follows
	}
	return b
}

// WriteBW measures RDMA WRITE bandwidth from A to B with depth WRs in
// flight, for iters messages of size bytes or until dur elapses (whichever
// is first; dur 0 means iters only).
func WriteBW(ctx context.Context, p *Pair, size, iters, depth int, dur time.Duration) (BWResult, error) {
	a, b := p.A, p.B
	if size > len(a.Buf) || size > len(b.Buf) {
		return BWResult{}, fmt.Errorf("bench: size %d exceeds the registered buffer (%d)", size, len(a.Buf))
	}
	wr := hca.SendWR{Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
		SGL: []hca.SGE{a.MR.SGE(0, size)}, RemoteAddr: b.MR.Addr(), RKey: b.MR.RKey()}
	wcs := make([]hca.WC, depth)
	posted, done := 0, 0
	start := time.Now()
	var deadline time.Time
	if dur > 0 {
		deadline = start.Add(dur)
	}
	for done < iters {
		for posted < iters && posted-done < depth && (deadline.IsZero() || posted == done || time.Now().Before(deadline)) {
			wr.ID = uint64(posted)
			if err := a.QP.PostSend(&wr); err != nil {
				return BWResult{}, err
			}
			posted++
		}
		if posted == done {
			iters = done // the deadline passed with nothing in flight
			break
		}
		if err := a.CQ.Wait(ctx); err != nil {
			return BWResult{}, err
		}
		n, err := a.CQ.Poll(wcs)
		if err != nil {
			return BWResult{}, err
		}
		for _, wc := range wcs[:n] {
			if wc.Status != transport.StatusSuccess {
				return BWResult{}, fmt.Errorf("bench: write %d completed with %q", wc.WRID, wc.Status)
			}
		}
		done += n
		if !deadline.IsZero() && time.Now().After(deadline) && posted == done {
			break
		}
	}
	el := time.Since(start)
	return BWResult{Op: "RDMA_WRITE", Size: size, Iters: done, Duration: el,
		BytesPerSec: float64(done) * float64(size) / el.Seconds(), MsgPerSec: float64(done) / el.Seconds()}, nil
}

// SendLat measures SEND latency by ping-pong between A and B, as
// ib_send_lat does: each side answers every message it receives.
func SendLat(ctx context.Context, p *Pair, size, iters int) (LatResult, error) {
	a, b := p.A, p.B
	if size > len(a.Buf) {
		return LatResult{}, fmt.Errorf("bench: size %d exceeds the registered buffer", size)
	}
	post := func(s *Side, id uint64) error {
		return s.QP.PostRecv(&hca.RecvWR{ID: id, SGL: []hca.SGE{s.MR.SGE(len(s.Buf)/2, size)}})
	}
	if err := post(a, 0); err != nil {
		return LatResult{}, err
	}
	if err := post(b, 0); err != nil {
		return LatResult{}, err
	}
	samples := make([]time.Duration, 0, iters)
	send := func(s *Side, i int) error {
		return s.QP.PostSend(&hca.SendWR{ID: uint64(i), Opcode: transport.WRSend, Flags: transport.SendSignaled, SGL: []hca.SGE{s.MR.SGE(0, size)}})
	}
	// recvOne waits for s's receive completion, skipping send completions.
	recvOne := func(s *Side) error {
		for {
			wc, err := WaitWC(ctx, s.CQ)
			if err != nil {
				return err
			}
			if wc.Status != transport.StatusSuccess {
				return fmt.Errorf("bench: completion %q", wc.Status)
			}
			if wc.Opcode == transport.WCRecv {
				return nil
			}
		}
	}
	for i := 0; i < iters; i++ {
		t0 := time.Now()
		if err := send(a, i); err != nil {
			return LatResult{}, err
		}
		if err := recvOne(b); err != nil {
			return LatResult{}, err
		}
		if err := post(b, uint64(i+1)); err != nil {
			return LatResult{}, err
		}
		if err := send(b, i); err != nil {
			return LatResult{}, err
		}
		if err := recvOne(a); err != nil {
			return LatResult{}, err
		}
		samples = append(samples, time.Since(t0)/2)
		if err := post(a, uint64(i+1)); err != nil {
			return LatResult{}, err
		}
	}
	// Drain the last send completions.
	for _, s := range []*Side{a, b} {
		var wcs [16]hca.WC
		s.CQ.Poll(wcs[:])
	}
	return latStats("SEND", size, samples), nil
}

// latMeasureTail is how many of the largest samples perftest leaves out of
// its latency statistics (LAT_MEASURE_TAIL).
const latMeasureTail = 2

// latStats computes the latency statistics of samples s (which it sorts)
// as perftest's print_report_lat does: the two largest samples are left
// out; t_typical is the median of the rest (the mean of the middle two for
// an even count), t_avg and t_stdev are over the rest, t_max is the
// largest sample kept in the sorted array's index of the count (the
// second largest overall), and the percentiles are the samples at
// ceil(count * 0.99) and ceil(count * 0.999).
func latStats(op string, size int, s []time.Duration) LatResult {
	r := LatResult{Op: op, Size: size, Iters: len(s)}
	if len(s) == 0 {
		return r
	}
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	n := len(s)
	if n > latMeasureTail {
		n -= latMeasureTail
	}
	at := func(i int) time.Duration { return s[min(i, len(s)-1)] }
	if (n-1)%2 != 0 {
		r.Typical = (at(n/2) + at(n/2-1)) / 2
	} else {
		r.Typical = at(n / 2)
	}
	var sum time.Duration
	for _, d := range s[:n] {
		sum += d
	}
	r.Min, r.Max, r.Avg = s[0], at(n), sum/time.Duration(n)
	r.P99 = at(int(math.Ceil(float64(n) * 0.99)))
	r.P999 = at(int(math.Ceil(float64(n) * 0.999)))
	var v float64
	for _, d := range s[:n] {
		x := float64(d - r.Avg)
		v += x * x
	}
	r.Stdev = time.Duration(math.Sqrt(v / float64(n)))
	return r
}

// PrintBW prints bandwidth results in ib_write_bw's layout.
func PrintBW(w io.Writer, rs ...BWResult) {
	fmt.Fprintln(w, "---------------------------------------------------------------------------------------")
	fmt.Fprintln(w, " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]")
	for _, r := range rs {
		mb := r.BytesPerSec / 1e6
		peak := r.PeakBytesPerSec / 1e6
		if peak == 0 {
			peak = mb
		}
		fmt.Fprintf(w, " %-10d %-10d       %-10.2f         %-10.2f           %.6f\n", r.Size, r.Iters, peak, mb, r.MsgPerSec/1e6)
	}
	fmt.Fprintln(w, "---------------------------------------------------------------------------------------")
}

// PrintLat prints latency results in ib_send_lat's layout.
func PrintLat(w io.Writer, rs ...LatResult) {
	us := func(d time.Duration) float64 { return float64(d) / 1e3 }
	fmt.Fprintln(w, "---------------------------------------------------------------------------------------")
	fmt.Fprintln(w, " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec]")
	for _, r := range rs {
		fmt.Fprintf(w, " %-7d %-10d     %-7.2f        %-7.2f      %-7.2f            %-7.2f        %-7.2f         %-7.2f                %-7.2f\n",
			r.Size, r.Iters, us(r.Min), us(r.Max), us(r.Typical), us(r.Avg), us(r.Stdev), us(r.P99), us(r.P999))
	}
	fmt.Fprintln(w, "---------------------------------------------------------------------------------------")
}
