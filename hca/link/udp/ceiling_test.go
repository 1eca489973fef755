package udp

import (
	"context"
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

func TestBlast(t *testing.T) {
	ns := newNetNS(t, "fd00::1/128", "fd00::2/128")
	for _, tc := range []struct {
		name     string
		src, dst string
		noGSO    bool
	}{
		{"ipv4-gso", "127.0.0.1", "127.0.0.2", false},
		{"ipv4-sendmmsg", "127.0.0.1", "127.0.0.2", true},
		{"ipv6-gso", "fd00::1", "fd00::2", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var res BlastResult
			var err error
			ns.do(t, func() {
				res, err = Blast(context.Background(), BlastConfig{Src: netip.MustParseAddr(tc.src), Dst: netip.MustParseAddr(tc.dst),
					Size: 4112, NoGSO: tc.noGSO, Duration: 200 * time.Millisecond})
			})
			if err != nil {
				t.Fatal(err)
			}
			if res.Sent == 0 || res.Received == 0 || res.Received > res.Sent || res.Duration < 200*time.Millisecond {
				t.Fatalf("%+v", res)
			}
			if len(res.Rates) != BlastSlices {
				t.Fatalf("%d slice rates, want %d: %v", len(res.Rates), BlastSlices, res.Rates)
			}
			// Slices are 20 ms, and one may see nothing on a loaded
			// host (CI runs packages side by side); all of them cannot,
			// and no rate can be negative.
			var sum float64
			for i, r := range res.Rates {
				if r < 0 {
					t.Errorf("slice %d: rate %v: %v", i, r, res.Rates)
				}
				sum += r
			}
			if sum == 0 {
				t.Errorf("no slice saw a datagram arrive, yet %d did", res.Received)
			}
			t.Logf("%s: %d sent, %d received in %v (%.2f GB/s of datagrams)", tc.name, res.Sent, res.Received, res.Duration,
				float64(res.Received)*4112/res.Duration.Seconds()/1e9)
		})
	}
}

func TestBlastErrors(t *testing.T) {
	v4, v6 := netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("::1")
	for _, c := range []BlastConfig{
		{Src: v4, Size: 100},
		{Src: v4, Dst: v6, Size: 100},
		{Src: v4, Dst: v4, Size: 0},
		{Src: v4, Dst: v4, Size: 70000},
	} {
		if _, err := Blast(context.Background(), c); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
}

func TestMessageRuns(t *testing.T) {
	rep := func(n, v int) []int {
		s := make([]int, n)
		for i := range s {
			s[i] = v
		}
		return s
	}
	cat := func(ss ...[]int) []int {
		var out []int
		for _, s := range ss {
			out = append(out, s...)
		}
		return out
	}
	for _, tc := range []struct {
		name  string
		sizes []int
		want  []int
	}{
		{"one", []int{60}, []int{1}},
		// RDMA WRITE, 64 KiB at MTU 4096: the first packet's RETH makes it
		// longest; it leads a run that the next, shorter packet ends.
		{"write-64k", cat([]int{4128}, rep(15, 4112)), []int{2, 14}},
		{"write-64k-twice", cat([]int{4128}, rep(15, 4112), []int{4128}, rep(15, 4112)), []int{2, 14, 2, 14}},
		// SEND packets are all one size: 15 fit in 65507 bytes.
		{"send-64k", rep(16, 4112), []int{15, 1}},
		{"send-64k-twice", rep(32, 4112), []int{15, 15, 2}},
		// READ responses: the first and last carry an AETH.
		{"read-64k", cat([]int{4116}, rep(14, 4112), []int{4116}), []int{2, 13, 1}},
		{"shorter-tail", []int{1000, 1000, 500, 1000}, []int{3, 1}},
		{"segment-cap", rep(70, 100), []int{64, 6}},
		{"longer-breaks", []int{100, 200, 200}, []int{1, 2}},
	} {
		if got := MessageRuns(tc.sizes); !slices.Equal(got, tc.want) {
			t.Errorf("%s: MessageRuns = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestShapedBatch(t *testing.T) {
	write := append([]int{4128}, slices.Repeat([]int{4112}, 15)...)
	for _, tc := range []struct {
		name     string
		shape    []int
		batch    int
		noGSO    bool
		wantMsgs int
		wantRuns int
	}{
		{"write-64k", write, 64, false, 32, 64},
		{"send-64k", slices.Repeat([]int{4112}, 16), 64, false, 60, 64},
		{"write-64k-no-gso", write, 64, true, 4, 64},
		{"one-message-over-the-batch", write, 1, false, 1, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msgs, n := shapedBatch(tc.shape, tc.batch, tc.noGSO)
			if n != tc.wantMsgs || len(msgs) != tc.wantRuns {
				t.Fatalf("%d messages in %d mmsghdrs, want %d in %d", n, len(msgs), tc.wantMsgs, tc.wantRuns)
			}
			// Every byte of the n messages is sent once, and every run of
			// two or more datagrams names its first one's size as its
			// segment size.
			total, seq := 0, []int{}
			for range n {
				seq = append(seq, tc.shape...)
			}
			for _, sz := range seq {
				total -= sz
			}
			d := 0
			for i := range msgs {
				m := &msgs[i]
				l := int(m.Hdr.Iov.Len)
				total += l
				if m.Hdr.Controllen == 0 {
					if l != seq[d] {
						t.Fatalf("mmsghdr %d: %d bytes without UDP_SEGMENT, datagram %d is %d", i, l, d, seq[d])
					}
					d++
					continue
				}
				if tc.noGSO {
					t.Fatalf("mmsghdr %d: a UDP_SEGMENT cmsg with noGSO", i)
				}
				c := unsafe.Slice(m.Hdr.Control, m.Hdr.Controllen)
				seg := int(binary.NativeEndian.Uint16(c[unix.CmsgLen(0):]))
				if seg != seq[d] {
					t.Fatalf("mmsghdr %d: segment size %d, its first datagram is %d", i, seg, seq[d])
				}
				for l > 0 {
					l -= seq[d]
					d++
				}
				if l != 0 {
					t.Fatalf("mmsghdr %d does not end on a datagram", i)
				}
			}
			if total != 0 || d != len(seq) {
				t.Fatalf("byte balance %d, %d of %d datagrams", total, d, len(seq))
			}
		})
	}
}

func TestBlastShape(t *testing.T) {
	ns := newNetNS(t, "fd00::1/128", "fd00::2/128")
	write := append([]int{4128}, slices.Repeat([]int{4112}, 15)...)
	for _, tc := range []struct {
		name     string
		src, dst string
		noGSO    bool
	}{
		{"ipv4", "127.0.0.1", "127.0.0.2", false},
		{"ipv4-no-gso", "127.0.0.1", "127.0.0.2", true},
		{"ipv6", "fd00::1", "fd00::2", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var res BlastResult
			var err error
			ns.do(t, func() {
				res, err = Blast(context.Background(), BlastConfig{Src: netip.MustParseAddr(tc.src), Dst: netip.MustParseAddr(tc.dst),
					Shape: write, NoGSO: tc.noGSO, Duration: 200 * time.Millisecond})
			})
			if err != nil {
				t.Fatal(err)
			}
			// Sent and Received count 64 KiB messages: at most a few
			// hundred thousand a second on any host this runs on.
			if res.Sent == 0 || res.Received == 0 || res.Received > res.Sent || res.Sent > 200_000 {
				t.Fatalf("%+v", res)
			}
			t.Logf("%s: %d messages sent, %d received in %v (%.2f GB/s of datagrams)", tc.name, res.Sent, res.Received, res.Duration,
				float64(res.Received)*65808/res.Duration.Seconds()/1e9)
		})
	}
	if _, err := Blast(context.Background(), BlastConfig{Src: netip.MustParseAddr("127.0.0.1"), Dst: netip.MustParseAddr("127.0.0.2"),
		Shape: []int{4112, 0}}); err == nil {
		t.Error("a shape with a 0-byte datagram: no error")
	}
}

// TestMessageRunsProperties: on random shapes, the runs cover every
// datagram once, in order, and each is a valid GSO super-datagram led by
// its longest segment (equal ones after it, at most one shorter and only
// last, within the segment and size caps); a run ends early only where
// the next datagram could not join it.
func TestMessageRunsProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	sizes := []int{32, 1040, 1056, 4112, 4116, 4128, 9000}
	for range 2000 {
		shape := make([]int, 1+rng.IntN(100))
		for i := range shape {
			shape[i] = sizes[rng.IntN(len(sizes))]
			if rng.IntN(4) == 0 && i > 0 {
				shape[i] = shape[i-1] // runs of equal sizes, as messages have
			}
		}
		d := 0
		for k, r := range MessageRuns(shape) {
			if r < 1 || r > maxGSOSegments || d+r > len(shape) {
				t.Fatalf("%v: run %d of %d segments at %d", shape, k, r, d)
			}
			run := shape[d : d+r]
			sum := 0
			for i, sz := range run {
				sum += sz
				if i > 0 && (sz > run[0] || sz < run[0] && i != r-1) {
					t.Fatalf("%v: run %d %v is no GSO super-datagram", shape, k, run)
				}
			}
			if sum > 65507 {
				t.Fatalf("%v: run %d is %d bytes", shape, k, sum)
			}
			d += r
			if d < len(shape) && run[r-1] == run[0] && r < maxGSOSegments && shape[d] <= run[0] && sum+shape[d] <= 65507 {
				t.Fatalf("%v: run %d %v ends although %d could join it", shape, k, run, shape[d])
			}
		}
		if d != len(shape) {
			t.Fatalf("%v: runs cover %d datagrams", shape, d)
		}
	}
}
