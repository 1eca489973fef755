package memlink

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/goroce/goroce/hca/link"
)

// ipFrame returns a FormatIP-shaped frame: IPv4 (IHL 5) + UDP + a BTH-sized
// region + payload, with a sequence number in the payload.
func ipFrame(seq int, size int) []byte {
	f := make([]byte, size)
	f[0] = 0x45
	f[9] = 17
	for i := 28; i < size; i++ {
		f[i] = byte(i)
	}
	f[40] = byte(seq >> 8)
	f[41] = byte(seq)
	return f
}

func seqOf(f []byte) int { return int(f[40])<<8 | int(f[41]) }

func writeAll(t *testing.T, e *Endpoint, frames [][]byte) {
	t.Helper()
	for len(frames) > 0 {
		k := min(len(frames), e.BatchSize())
		n, err := e.Write(frames[:k], 0)
		if err != nil || n != k {
			t.Fatalf("Write = %d, %v; want %d", n, err, k)
		}
		frames = frames[k:]
	}
}

// readN reads until it has n frames; it fails the test if Read errors.
func readN(t *testing.T, e *Endpoint, n int) [][]byte {
	t.Helper()
	bufs := make([][]byte, e.BatchSize())
	for i := range bufs {
		bufs[i] = make([]byte, 10000)
	}
	sizes := make([]int, len(bufs))
	var out [][]byte
	for len(out) < n {
		k, err := e.Read(bufs, sizes, 0)
		if err != nil {
			t.Fatalf("Read after %d frames: %v", len(out), err)
		}
		for i := range k {
			out = append(out, bytes.Clone(bufs[i][:sizes[i]]))
		}
	}
	return out
}

func frames(n, size int) [][]byte {
	fs := make([][]byte, n)
	for i := range fs {
		fs[i] = ipFrame(i, size)
	}
	return fs
}

func TestLosslessInOrder(t *testing.T) {
	a, b := NewPair(Config{BatchSize: 8})
	defer a.Close()
	defer b.Close()
	in := frames(100, 200)
	writeAll(t, a, in)
	out := readN(t, b, 100)
	for i := range in {
		if !bytes.Equal(in[i], out[i]) {
			t.Fatalf("frame %d differs", i)
		}
	}
	st := a.Stats()
	if st.Sent != 100 || st.Delivered != 100 || st.Dropped != 0 {
		t.Fatalf("stats %+v", st)
	}
	if b.Stats().Sent != 0 {
		t.Fatalf("B->A stats not separate: %+v", b.Stats())
	}
}

// run writes n frames with faults f and reads everything that arrives.
func run(t *testing.T, seed uint64, f Faults, n int) ([]int, Stats) {
	t.Helper()
	a, b := NewPair(Config{Seed: seed, AtoB: f, QueueLen: 4 * n})
	defer a.Close()
	defer b.Close()
	writeAll(t, a, frames(n, 100))
	st := a.Stats()
	want := int(st.Sent - st.Dropped + st.Duplicated)
	got := readN(t, b, want)
	seqs := make([]int, len(got))
	for i, g := range got {
		seqs[i] = seqOf(g)
	}
	return seqs, a.Stats()
}

func TestFaultsDeterministic(t *testing.T) {
	f := Faults{Loss: 0.1, Duplicate: 0.1, Reorder: 0.1, Corrupt: 0.1}
	s1, st1 := run(t, 42, f, 2000)
	s2, st2 := run(t, 42, f, 2000)
	if fmt.Sprint(s1) != fmt.Sprint(s2) || st1 != st2 {
		t.Fatalf("same seed, different outcome:\n%v\n%v", st1, st2)
	}
	s3, _ := run(t, 43, f, 2000)
	if fmt.Sprint(s1) == fmt.Sprint(s3) {
		t.Fatal("different seeds gave identical outcomes")
	}
}

func TestFaultRates(t *testing.T) {
	const n = 20000
	for _, tc := range []struct {
		name string
		f    Faults
		get  func(Stats) uint64
	}{
		{"loss", Faults{Loss: 0.1}, func(s Stats) uint64 { return s.DroppedLoss }},
		{"duplicate", Faults{Duplicate: 0.1}, func(s Stats) uint64 { return s.Duplicated }},
		{"corrupt", Faults{Corrupt: 0.1}, func(s Stats) uint64 { return s.Corrupted }},
		{"reorder", Faults{Reorder: 0.1}, func(s Stats) uint64 { return s.Reordered }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, st := run(t, 7, tc.f, n)
			// 10% of 20000 = 2000, sd ~42; +-300 is over 7 sd.
			if got := tc.get(st); got < 1700 || got > 2300 {
				t.Fatalf("count %d, want about 2000 (stats %+v)", got, st)
			}
			if st.Sent != n {
				t.Fatalf("Sent = %d", st.Sent)
			}
			if st.Delivered != st.Sent-st.Dropped+st.Duplicated {
				t.Fatalf("delivered %d != sent-dropped+dup (%+v)", st.Delivered, st)
			}
		})
	}
}

func TestReorderSwapsNeighbours(t *testing.T) {
	seqs, st := run(t, 1, Faults{Reorder: 1}, 6)
	if want := "[1 0 3 2 5 4]"; fmt.Sprint(seqs) != want {
		t.Fatalf("order %v, want %s", seqs, want)
	}
	if st.Reordered != 3 {
		t.Fatalf("Reordered = %d", st.Reordered)
	}
}

func TestReorderLastFrameNotLost(t *testing.T) {
	seqs, _ := run(t, 1, Faults{Reorder: 1}, 1)
	if fmt.Sprint(seqs) != "[0]" {
		t.Fatalf("got %v", seqs)
	}
}

func TestDuplicate(t *testing.T) {
	seqs, st := run(t, 1, Faults{Duplicate: 1}, 3)
	if want := "[0 0 1 1 2 2]"; fmt.Sprint(seqs) != want {
		t.Fatalf("order %v, want %s", seqs, want)
	}
	if st.Duplicated != 3 || st.Delivered != 6 {
		t.Fatalf("stats %+v", st)
	}
}

func TestCorruptHitsCoveredByte(t *testing.T) {
	for _, tc := range []struct {
		name   string
		format link.Format
		frame  func() []byte
		bthOff int
	}{
		{"ipv4", link.FormatIP, func() []byte { return ipFrame(0, 64) }, 28},
		{"ipv6", link.FormatIP, func() []byte { f := make([]byte, 80); f[0] = 0x60; return f }, 48},
		{"ethernet-ipv4", link.FormatEthernet, func() []byte {
			f := make([]byte, 14+64)
			f[12], f[13] = 0x08, 0x00
			copy(f[14:], ipFrame(0, 64))
			return f
		}, 14 + 28},
		{"ethernet-vlan-rocev1", link.FormatEthernet, func() []byte {
			f := make([]byte, 18+40+12+8)
			f[12], f[13], f[16], f[17] = 0x81, 0x00, 0x89, 0x15
			return f
		}, 18 + 40},
		{"ib-grh", link.FormatIB, func() []byte { f := make([]byte, 8+40+16); f[1] = 3; return f }, 48},
		{"ib-lrh", link.FormatIB, func() []byte { f := make([]byte, 8+16); f[1] = 2; return f }, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := NewPair(Config{Format: tc.format, Seed: 3, AtoB: Faults{Corrupt: 1}})
			defer a.Close()
			defer b.Close()
			const n = 500
			in := make([][]byte, n)
			for i := range in {
				in[i] = tc.frame()
			}
			writeAll(t, a, in)
			out := readN(t, b, n)
			for i := range out {
				diff := -1
				for j := range out[i] {
					if out[i][j] != in[i][j] {
						if diff >= 0 {
							t.Fatalf("frame %d: more than one byte changed", i)
						}
						diff = j
					}
				}
				if diff < tc.bthOff || diff == tc.bthOff+4 {
					t.Fatalf("frame %d: byte %d changed, want >= %d and not BTH byte 4", i, diff, tc.bthOff)
				}
			}
		})
	}
}

func TestDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := NewPair(Config{AtoB: Faults{Delay: 50 * time.Millisecond, Jitter: 10 * time.Millisecond}, Seed: 9})
		defer a.Close()
		defer b.Close()
		start := time.Now()
		writeAll(t, a, frames(10, 100))
		out := readN(t, b, 10)
		el := time.Since(start)
		if el < 50*time.Millisecond || el >= 60*time.Millisecond {
			t.Fatalf("frames arrived after %v, want [50ms, 60ms)", el)
		}
		for i, f := range out {
			if seqOf(f) != i {
				t.Fatalf("delay reordered frames: %d at %d", seqOf(f), i)
			}
		}
	})
}

func TestDelayedReadUnblocksOnClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := NewPair(Config{AtoB: Faults{Delay: time.Hour}})
		defer a.Close()
		writeAll(t, a, frames(1, 100))
		errc := make(chan error)
		go func() {
			_, err := b.Read([][]byte{make([]byte, 200)}, []int{0}, 0)
			errc <- err
		}()
		synctest.Wait()
		b.Close()
		if err := <-errc; !errors.Is(err, link.ErrClosed) {
			t.Fatalf("Read = %v, want ErrClosed", err)
		}
	})
}

func TestQueueFullDrops(t *testing.T) {
	a, b := NewPair(Config{QueueLen: 4})
	defer a.Close()
	defer b.Close()
	writeAll(t, a, frames(10, 100))
	if st := a.Stats(); st.DroppedQueueFull != 6 || st.Dropped != 6 {
		t.Fatalf("stats %+v", st)
	}
	out := readN(t, b, 4)
	for i, f := range out {
		if seqOf(f) != i {
			t.Fatalf("kept frame %d at %d", seqOf(f), i)
		}
	}
}

func TestReaderBufferTooSmall(t *testing.T) {
	a, b := NewPair(Config{})
	defer a.Close()
	defer b.Close()
	writeAll(t, a, [][]byte{ipFrame(0, 300), ipFrame(1, 100)})
	bufs := [][]byte{make([]byte, 200)}
	sizes := []int{0}
	n, err := b.Read(bufs, sizes, 50)
	if err != nil || n != 1 || sizes[0] != 100 || seqOf(bufs[0][50:]) != 1 {
		t.Fatalf("Read = %d, %v, size %d", n, err, sizes[0])
	}
	if st := a.Stats(); st.DroppedTooLarge != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestWriteValidation(t *testing.T) {
	for _, tc := range []struct {
		name   string
		format link.Format
		frame  []byte
		want   error
	}{
		{"ip-over-mtu", link.FormatIP, make([]byte, 1501), link.ErrFrameTooLarge},
		{"ip-empty", link.FormatIP, nil, ErrEmptyFrame},
		{"eth-over-mtu", link.FormatEthernet, make([]byte, 1515), link.ErrFrameTooLarge},
		{"eth-short", link.FormatEthernet, make([]byte, 13), ErrEmptyFrame},
		{"ib-over-mtu", link.FormatIB, make([]byte, 1501), link.ErrFrameTooLarge},
		{"ib-short", link.FormatIB, make([]byte, 7), ErrEmptyFrame},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := NewPair(Config{Format: tc.format, MTU: 1500})
			defer a.Close()
			defer b.Close()
			ok := make([]byte, 100)
			n, err := a.Write([][]byte{ok, tc.frame, ok}, 0)
			if n != 1 || !errors.Is(err, tc.want) {
				t.Fatalf("Write = %d, %v; want 1, %v", n, err, tc.want)
			}
		})
	}
	// Exactly the limit is fine, with and without a VLAN tag.
	a, b := NewPair(Config{Format: link.FormatEthernet, MTU: 1500})
	defer a.Close()
	defer b.Close()
	tagged := make([]byte, 1518)
	tagged[12] = 0x81
	if n, err := a.Write([][]byte{make([]byte, 1514), tagged}, 0); n != 2 || err != nil {
		t.Fatalf("Write at the limit = %d, %v", n, err)
	}
}

func TestPairRejectsBadConfig(t *testing.T) {
	for _, c := range []Config{
		{Format: 9},
		{MTU: -1},
		{QueueLen: -1},
		{AtoB: Faults{Loss: 1.5}},
		{BtoA: Faults{Corrupt: -0.1}},
		{AtoB: Faults{Delay: -time.Second}},
	} {
		if _, _, err := Pair(c); err == nil {
			t.Errorf("Pair(%+v) succeeded", c)
		}
	}
}

func TestPeerClosedCounted(t *testing.T) {
	a, b := NewPair(Config{})
	defer a.Close()
	writeAll(t, a, frames(3, 100))
	b.Close()
	writeAll(t, a, frames(2, 100))
	if st := a.Stats(); st.DroppedPeerClosed != 5 {
		t.Fatalf("stats %+v", st)
	}
	if _, err := b.Write(frames(1, 100), 0); !errors.Is(err, link.ErrClosed) {
		t.Fatalf("Write after Close = %v", err)
	}
}

func TestDefaults(t *testing.T) {
	a, b := NewPair(Config{Format: link.FormatEthernet})
	defer a.Close()
	defer b.Close()
	if a.MTU() != DefaultMTU || a.BatchSize() != link.IdealBatchSize || a.Headroom() != 0 {
		t.Fatalf("defaults: MTU %d batch %d", a.MTU(), a.BatchSize())
	}
	if a.HardwareAddr().String() == b.HardwareAddr().String() || a.Addrs()[0] == b.Addrs()[0] {
		t.Fatal("endpoints share an address")
	}
	c, d := NewPair(Config{Format: link.FormatIB})
	defer c.Close()
	defer d.Close()
	if c.MTU() != DefaultIBMTU || c.HardwareAddr() != nil {
		t.Fatalf("IB defaults: %d %v", c.MTU(), c.HardwareAddr())
	}
}

func TestZeroAllocs(t *testing.T) {
	a, b := NewPair(Config{AtoB: Faults{Duplicate: 0.2, Reorder: 0.2, Corrupt: 0.2, Loss: 0.1}})
	defer a.Close()
	defer b.Close()
	in := frames(32, 1082)
	bufs := make([][]byte, 64)
	for i := range bufs {
		bufs[i] = make([]byte, 2048)
	}
	sizes := make([]int, 64)
	cycle := func() {
		a.Write(in, 0)
		for {
			a.tx.mu.Lock()
			pending := a.tx.n
			a.tx.mu.Unlock()
			if pending == 0 {
				break
			}
			b.Read(bufs, sizes, 0)
		}
	}
	for range 10 {
		cycle() // warm the buffer free list
	}
	if n := testing.AllocsPerRun(100, cycle); n != 0 {
		t.Fatalf("%v allocs per batch", n)
	}
}

func BenchmarkWriteRead(b *testing.B) {
	for _, size := range []int{1082, 4154} {
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			x, y := NewPair(Config{})
			defer x.Close()
			defer y.Close()
			in := frames(64, size)
			bufs := make([][]byte, 64)
			for i := range bufs {
				bufs[i] = make([]byte, size)
			}
			sizes := make([]int, 64)
			b.ReportAllocs()
			b.SetBytes(int64(64 * size))
			for b.Loop() {
				x.Write(in, 0)
				for got := 0; got < 64; {
					n, _ := y.Read(bufs, sizes, 0)
					got += n
				}
			}
			b.ReportMetric(float64(64*b.N)/b.Elapsed().Seconds(), "frames/s")
		})
	}
}
