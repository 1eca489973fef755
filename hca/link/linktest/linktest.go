package linktest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/hca/link"
	"github.com/goroce/goroce/wire"
)

// NewPair returns two connected endpoints; Run closes them.
type NewPair func(t *testing.T) (a, b link.Endpoint)

// Timeout bounds every wait of the suite; a lossless link that takes longer
// than this to deliver a few hundred frames is broken.
const Timeout = 10 * time.Second

// Run runs the conformance suite against the backend made by newPair, which
// must be lossless and in order when not overloaded (the suite stays well
// within socket buffer sizes). newPair is called once per subtest.
func Run(t *testing.T, newPair NewPair) {
	tests := []struct {
		name string
		fn   func(t *testing.T, a, b link.Endpoint)
	}{
		{"Properties", testProperties},
		{"InOrderIntact", testInOrder},
		{"EqualSizeRun", testEqualSizeRun},
		{"UpToMTU", testUpToMTU},
		{"OverMTURejected", testOverMTU},
		{"BatchSize", testBatchSize},
		{"ReadBufferTooSmall", testSmallBuffer},
		{"BadOffsetRefused", testBadOffset},
		{"CloseUnblocksRead", testCloseUnblocksRead},
		{"ConcurrentBothWays", testConcurrent},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, b := newPair(t)
			defer a.Close()
			defer b.Close()
			tc.fn(t, a, b)
		})
	}
	t.Run("NoGoroutineLeft", func(t *testing.T) {
		before := runtime.NumGoroutine()
		a, b := newPair(t)
		t.Cleanup(func() { a.Close(); b.Close() })
		sendRecv(t, a, b, 0, frameRange(t, a, b, 0, 20, func(int) int { return 64 }))
		a.Close()
		b.Close()
		deadline := time.Now().Add(Timeout)
		for runtime.NumGoroutine() > before {
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<16)
				t.Fatalf("%d goroutines after Close, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}

// Frame builds a valid frame of src's Format from src to dst: an RC SEND
// ONLY with the given PSN to QP 0x11 carrying payload bytes of a pattern
// derived from the PSN, with every lower header and the ICRC (and VCRC)
// filled in by wire.Finish. IP frames use src's first address and, when
// src is a link.SourcePorter, its source port; IPv4 frames carry IP ID 0
// and DF, as a kernel UDP socket sends them.
func Frame(src, dst link.Endpoint, psn bth.PSN, payload int) ([]byte, error) {
	a, framing, err := addrFor(src, dst)
	if err != nil {
		return nil, err
	}
	hr := a.Headroom(framing)
	pad := (4 - payload%4) % 4
	n := bth.HeaderLen + payload + pad
	buf := make([]byte, hr+n+wire.Tailroom)
	bth.Header(buf[hr:]).Encode(&bth.Fields{Opcode: bth.OpRCSendOnly, PadCnt: pad, PKey: 0xFFFF,
		DestQP: 0x11, AckReq: true, PSN: psn})
	for i := range payload {
		buf[hr+bth.HeaderLen+i] = byte(int(psn)*7 + i)
	}
	return wire.Finish(buf, hr, n, framing, a)
}

// ACK returns a complete RC ACKNOWLEDGE frame (BTH, AETH, ICRC: 20 bytes,
// as long as a SEND_ONLY of 1 to 4 bytes) from src to dst for psn, to
// destination QP qpn.
func ACK(src, dst link.Endpoint, qpn bth.QPN, psn bth.PSN) ([]byte, error) {
	a, framing, err := addrFor(src, dst)
	if err != nil {
		return nil, err
	}
	hr := a.Headroom(framing)
	n := bth.HeaderLen + bth.AETHLen
	buf := make([]byte, hr+n+wire.Tailroom)
	bth.Header(buf[hr:]).Encode(&bth.Fields{Opcode: bth.OpRCAcknowledge, PKey: 0xFFFF, DestQP: qpn, PSN: psn})
	// AETH: syndrome 0x1F (ACK, no credit count), MSN psn.
	binary.BigEndian.PutUint32(buf[hr+bth.HeaderLen:], 0x1F<<24|uint32(psn)&0xFFFFFF)
	return wire.Finish(buf, hr, n, framing, a)
}

func addrFor(src, dst link.Endpoint) (*wire.Addr, wire.Framing, error) {
	a := &wire.Addr{HopLimit: 64, DontFragment: true, SrcPort: 0xC001}
	if sp, ok := src.(link.SourcePorter); ok {
		a.SrcPort = sp.SourcePort()
	}
	switch src.Format() {
	case link.FormatIB:
		a.Kind, a.SLID, a.DLID = wire.KindIB, 1, 2
		return a, wire.FramingIB, nil
	case link.FormatIP, link.FormatEthernet:
	default:
		return nil, 0, fmt.Errorf("linktest: unknown format %v", src.Format())
	}
	sa, da := first(src.Addrs()), first(dst.Addrs())
	if !sa.IsValid() || !da.IsValid() || sa.Is4() != da.Is4() {
		return nil, 0, fmt.Errorf("linktest: endpoints need addresses of one family, have %v and %v", src.Addrs(), dst.Addrs())
	}
	a.SrcIP, a.DstIP = sa, da
	a.Kind = wire.KindRoCEv2IPv6
	if sa.Is4() {
		a.Kind = wire.KindRoCEv2IPv4
	}
	if src.Format() == link.FormatIP {
		return a, wire.FramingIP, nil
	}
	copy(a.SrcMAC[:], src.HardwareAddr())
	copy(a.DstMAC[:], dst.HardwareAddr())
	return a, wire.FramingEthernet, nil
}

func first(as []netip.Addr) netip.Addr {
	if len(as) == 0 {
		return netip.Addr{}
	}
	return as[0].Unmap()
}

// overhead returns the frame bytes around the payload (headers, ICRC, VCRC)
// and how many bytes of a frame count against the MTU beyond the IP packet.
func overhead(t *testing.T, src, dst link.Endpoint) (hdr, linkHdr int) {
	f, err := Frame(src, dst, 0, 0)
	if err != nil {
		t.Fatalf("building a frame: %v", err)
	}
	if src.Format() == link.FormatEthernet {
		linkHdr = wire.EthernetLen
	}
	return len(f), linkHdr
}

// maxPayload is the largest 4-byte-aligned payload whose frame fits the MTU
// (and the 16-bit IP length fields).
func maxPayload(t *testing.T, a, b link.Endpoint) int {
	hdr, lh := overhead(t, a, b)
	limit := a.MTU() + lh
	if a.Format() != link.FormatIB {
		limit = min(limit, 65535+lh) // IPv4 total length; IPv6 payload length is larger
	}
	return (limit - hdr) &^ 3
}

func frameRange(t *testing.T, a, b link.Endpoint, psn0, n int, size func(i int) int) [][]byte {
	t.Helper()
	fs := make([][]byte, n)
	for i := range fs {
		f, err := Frame(a, b, bth.PSN(psn0+i)&bth.PSNMask, size(i))
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		fs[i] = f
	}
	return fs
}

// writeAll writes frames in batches of the endpoint's batch size.
func writeAll(e link.Endpoint, frames [][]byte) error {
	for len(frames) > 0 {
		k := min(len(frames), e.BatchSize())
		n, err := e.Write(frames[:k], 0)
		if err != nil {
			return fmt.Errorf("Write of %d frames: %d sent: %w", k, n, err)
		}
		if n != k {
			return fmt.Errorf("Write of %d frames returned %d without error", k, n)
		}
		frames = frames[k:]
	}
	return nil
}

// readAll reads len(want) frames from e, checking each against want in
// order and decoding it with wire (ICRC verified). It closes e and fails if
// that takes longer than Timeout.
func readAll(t *testing.T, e link.Endpoint, offset int, want [][]byte) {
	t.Helper()
	if err := ReadFrames(e, offset, want); err != nil {
		t.Fatal(err)
	}
}

// ReadFrames reads len(want) frames from e, each at offset in its buffer,
// and checks each against the frame written (Equivalent) and its ICRC
// (wire.Decode); a watchdog ends a read that hangs.
func ReadFrames(e link.Endpoint, offset int, want [][]byte) error {
	maxLen := 0
	for _, w := range want {
		maxLen = max(maxLen, len(w))
	}
	bufs := make([][]byte, e.BatchSize())
	for i := range bufs {
		bufs[i] = make([]byte, offset+maxLen+64)
	}
	sizes := make([]int, len(bufs))
	wd := NewWatchdog(Timeout, e)
	defer wd.Stop()
	var p wire.Packet
	got := 0
	for got < len(want) {
		n, err := e.Read(bufs, sizes, offset)
		if err != nil {
			return wd.Err(err, got, len(want))
		}
		if n < 1 || n > len(bufs) {
			return fmt.Errorf("Read returned n=%d for %d buffers", n, len(bufs))
		}
		for i := range n {
			f := bufs[i][offset : offset+sizes[i]]
			if got >= len(want) {
				return fmt.Errorf("more frames than written")
			}
			if !Equivalent(f, want[got], e.Format()) {
				return fmt.Errorf("frame %d differs (%d bytes, want %d):\n got %x\nwant %x", got, len(f), len(want[got]), head(f), head(want[got]))
			}
			if err := p.Decode(f, wire.Framing(e.Format())); err != nil {
				return fmt.Errorf("frame %d: wire.Decode: %v", got, err)
			}
			got++
		}
	}
	return nil
}

func head(b []byte) []byte { return b[:min(len(b), 64)] }

// sendRecv writes frames from a and reads them at b concurrently.
func sendRecv(t *testing.T, a, b link.Endpoint, offset int, frames [][]byte) {
	t.Helper()
	errc := make(chan error, 1)
	go func() { errc <- writeAll(a, frames) }()
	rerr := ReadFrames(b, offset, frames)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if rerr != nil {
		t.Fatal(rerr)
	}
}

func testProperties(t *testing.T, a, b link.Endpoint) {
	for _, e := range []link.Endpoint{a, b} {
		if e.BatchSize() < 1 || e.MTU() < 256 || e.Headroom() < 0 {
			t.Errorf("BatchSize %d, MTU %d, Headroom %d", e.BatchSize(), e.MTU(), e.Headroom())
		}
		switch e.Format() {
		case link.FormatIP, link.FormatEthernet:
			if len(e.Addrs()) == 0 {
				t.Error("an IP/Ethernet link without addresses")
			}
			if (e.Format() == link.FormatEthernet) != (len(e.HardwareAddr()) == 6) {
				t.Errorf("format %v with hardware address %v", e.Format(), e.HardwareAddr())
			}
		case link.FormatIB:
		default:
			t.Errorf("unknown format %v", e.Format())
		}
	}
	if a.Format() != b.Format() {
		t.Errorf("formats differ: %v and %v", a.Format(), b.Format())
	}
}

func testInOrder(t *testing.T, a, b link.Endpoint) {
	// Sizes cycle through small, odd (padded) and MTU-sized payloads.
	sizes := []int{0, 1, 3, 64, 255, 1024, 1000, 2048, 4096}
	mp := maxPayload(t, a, b)
	frames := frameRange(t, a, b, bth.PSNMask-100, 400, func(i int) int { return min(sizes[i%len(sizes)], mp) })
	sendRecv(t, a, b, 0, frames)
	// And the other way, read at an offset.
	sendRecv(t, b, a, 16, frameRange(t, b, a, 0, 50, func(i int) int { return i }))
}

// testEqualSizeRun sends long runs of equal-size packets of one QP with
// consecutive PSNs (what segmentation of a large message produces and what
// UDP GSO aggregates), a shorter last one included.
func testEqualSizeRun(t *testing.T, a, b link.Endpoint) {
	mp := maxPayload(t, a, b)
	for _, pmtu := range []int{256, 1024, 4096} {
		p := min(pmtu, mp)
		frames := frameRange(t, a, b, 1000, 300, func(i int) int {
			if i%50 == 49 {
				return p / 3 // the last packet of each 50-packet message
			}
			return p
		})
		sendRecv(t, a, b, 0, frames)
	}
}

func testUpToMTU(t *testing.T, a, b link.Endpoint) {
	mp := maxPayload(t, a, b)
	frames := frameRange(t, a, b, 7, 6, func(i int) int { return mp - 4*(i%3) })
	_, lh := overhead(t, a, b)
	limit := a.MTU() + lh
	if a.Format() != link.FormatIB {
		limit = min(limit, 65535+lh)
	}
	if l := len(frames[0]); l > limit || limit-l > 3 {
		t.Fatalf("largest frame %d bytes for MTU %d", l, a.MTU())
	}
	sendRecv(t, a, b, 0, frames)
}

func testOverMTU(t *testing.T, a, b link.Endpoint) {
	f, err := Frame(a, b, 1, 16)
	if err != nil {
		t.Fatal(err)
	}
	_, lh := overhead(t, a, b)
	big := make([]byte, a.MTU()+lh+1)
	copy(big, f)
	n, err := a.Write([][]byte{big}, 0)
	if n != 0 || !errors.Is(err, link.ErrFrameTooLarge) {
		t.Fatalf("Write(MTU+1) = %d, %v; want 0, ErrFrameTooLarge", n, err)
	}
	// Frames before the bad one are sent, and the endpoint stays usable.
	n, err = a.Write([][]byte{f, big}, 0)
	if n != 1 || !errors.Is(err, link.ErrFrameTooLarge) {
		t.Fatalf("Write(ok, MTU+1) = %d, %v; want 1, ErrFrameTooLarge", n, err)
	}
	g, err := Frame(a, b, 2, 16)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeAll(a, [][]byte{g}); err != nil {
		t.Fatal(err)
	}
	readAll(t, b, 0, [][]byte{f, g})
}

func testBatchSize(t *testing.T, a, b link.Endpoint) {
	bs := a.BatchSize()
	if b.BatchSize() != bs {
		t.Logf("batch sizes differ: %d and %d", bs, b.BatchSize())
	}
	frames := frameRange(t, a, b, 0, 3*bs, func(int) int { return 32 })
	n, err := a.Write(frames[:bs], 0)
	if n != bs || err != nil {
		t.Fatalf("Write of BatchSize frames = %d, %v", n, err)
	}
	if err := writeAll(a, frames[bs:]); err != nil {
		t.Fatal(err)
	}
	// Read with twice the batch size: never more than BatchSize at once.
	bufs := make([][]byte, 2*b.BatchSize())
	for i := range bufs {
		bufs[i] = make([]byte, 256)
	}
	sizes := make([]int, len(bufs))
	wd := NewWatchdog(Timeout, b)
	defer wd.Stop()
	for got := 0; got < len(frames); {
		n, err := b.Read(bufs, sizes, 0)
		if err != nil {
			t.Fatal(wd.Err(err, got, len(frames)))
		}
		if n > b.BatchSize() {
			t.Fatalf("Read returned %d frames, BatchSize %d", n, b.BatchSize())
		}
		for i := range n {
			if !Equivalent(bufs[i][:sizes[i]], frames[got], b.Format()) {
				t.Fatalf("frame %d differs", got)
			}
			got++
		}
	}
}

func testSmallBuffer(t *testing.T, a, b link.Endpoint) {
	big := frameRange(t, a, b, 0, 1, func(int) int { return 600 })[0]
	small := frameRange(t, a, b, 1, 1, func(int) int { return 8 })[0]
	if err := writeAll(a, [][]byte{big, small}); err != nil {
		t.Fatal(err)
	}
	// A 200-byte buffer holds the small frame only: the big one is dropped,
	// never truncated.
	bufs := [][]byte{make([]byte, 200)}
	sizes := []int{0}
	wd := NewWatchdog(Timeout, b)
	defer wd.Stop()
	n, err := b.Read(bufs, sizes, 0)
	if err != nil {
		t.Fatal(wd.Err(err, 0, 1))
	}
	if n != 1 || !Equivalent(bufs[0][:sizes[0]], small, b.Format()) {
		t.Fatalf("Read = %d, %v, %d bytes; want the %d-byte frame", n, err, sizes[0], len(small))
	}
}

// testBadOffset: an offset outside a buffer is API misuse, which gets an
// error (after the frames before it, for Write), never a panic, and leaves
// the endpoints usable and the frames waiting intact.
func testBadOffset(t *testing.T, a, b link.Endpoint) {
	fs := frameRange(t, a, b, 0, 2, func(int) int { return 32 })
	if n, err := a.Write(fs[:1], -1); n != 0 || err == nil {
		t.Fatalf("Write at offset -1 = %d, %v; want 0 and an error", n, err)
	}
	const head = 16
	with := append(make([]byte, head), fs[0]...)
	short := make([]byte, head/2)
	if n, err := a.Write([][]byte{with, short}, head); n != 1 || err == nil {
		t.Fatalf("Write with a buffer shorter than the offset = %d, %v; want 1 and an error", n, err)
	}
	// The frame sent is waiting (or on its way): misused Reads fail and
	// leave it there.
	bufs := [][]byte{make([]byte, 256), make([]byte, 256)}
	sizes := make([]int, len(bufs))
	if _, err := b.Read(bufs, sizes, -1); err == nil {
		t.Fatal("Read at offset -1 succeeded")
	}
	if _, err := b.Read(bufs, sizes, 256); err == nil {
		t.Fatal("Read at an offset that leaves no room succeeded")
	}
	if err := writeAll(a, fs[1:]); err != nil {
		t.Fatal(err)
	}
	readAll(t, b, 0, fs)
}

func testCloseUnblocksRead(t *testing.T, a, b link.Endpoint) {
	errc := make(chan error, 1)
	go func() {
		_, err := b.Read([][]byte{make([]byte, 2048)}, []int{0}, 0)
		errc <- err
	}()
	time.Sleep(50 * time.Millisecond) // let Read block (it returns ErrClosed either way)
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, link.ErrClosed) {
			t.Fatalf("blocked Read returned %v, want ErrClosed", err)
		}
	case <-time.After(Timeout):
		t.Fatal("Close did not unblock Read")
	}
	if err := b.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := b.Read([][]byte{make([]byte, 2048)}, []int{0}, 0); !errors.Is(err, link.ErrClosed) {
		t.Fatalf("Read after Close = %v", err)
	}
	f, _ := Frame(b, a, 0, 8)
	if _, err := b.Write([][]byte{f}, 0); !errors.Is(err, link.ErrClosed) {
		t.Fatalf("Write after Close = %v", err)
	}
}

func testConcurrent(t *testing.T, a, b link.Endpoint) {
	mp := min(maxPayload(t, a, b), 1500)
	ab := frameRange(t, a, b, 0, 300, func(i int) int { return (i * 37) % mp })
	ba := frameRange(t, b, a, 0, 300, func(i int) int { return (i * 53) % mp })
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	wg.Go(func() { errs <- writeAll(a, ab) })
	wg.Go(func() { errs <- writeAll(b, ba) })
	wg.Go(func() { errs <- ReadFrames(b, 0, ab) })
	wg.Go(func() { errs <- ReadFrames(a, 0, ba) })
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

// Equivalent reports whether frame got is frame want as a link may deliver
// it: equal except in the fields the ICRC does not cover, which routers and
// kernels rewrite (IPv4 TOS, TTL, header checksum; IPv6 traffic class, flow
// label, hop limit; UDP checksum), and except for the IPv4 identification
// and the ICRC together, which a link may renumber when it recomputes the
// ICRC (UDP GSO segments get IDs 0, 1, 2, ...). Callers check the ICRC with
// wire.Decode.
func Equivalent(got, want []byte, f link.Format) bool {
	if len(got) != len(want) {
		return false
	}
	off := 0
	switch f {
	case link.FormatIB:
		return bytes.Equal(got, want)
	case link.FormatEthernet:
		if len(want) < wire.EthernetLen {
			return bytes.Equal(got, want)
		}
		off = wire.Ethernet(want).HeaderLen()
	}
	g, w := bytes.Clone(got), bytes.Clone(want)
	mask := func(i int, m byte) {
		if off+i < len(g) {
			g[off+i] &^= m
			w[off+i] &^= m
		}
	}
	switch {
	case len(want) >= off+28 && want[off]>>4 == 4:
		for _, i := range []int{1, 8, 10, 11, 26, 27} {
			mask(i, 0xFF)
		}
		if string(got[off+4:off+6]) != string(want[off+4:off+6]) {
			mask(4, 0xFF)
			mask(5, 0xFF)
			clear(g[len(g)-4:])
			clear(w[len(w)-4:])
		}
	case len(want) >= off+48 && want[off]>>4 == 6:
		mask(0, 0x0F)
		for _, i := range []int{1, 2, 3, 7, 46, 47} {
			mask(i, 0xFF)
		}
	}
	return bytes.Equal(g, w)
}
