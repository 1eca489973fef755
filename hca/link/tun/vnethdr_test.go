//go:build linux

package tun

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"os"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/hca/link"
	"github.com/goroce/goroce/hca/link/internal/vnet"
	"github.com/goroce/goroce/hca/link/linktest"
)

// fakeDevice is a TUN endpoint with a virtio-net header and every offload
// whose fd is one end of a unix datagram socketpair instead of a device:
// each datagram sent on the returned fd is one read(2) of "the kernel", so
// a test can hand Read headers no kernel would. No root needed.
func fakeDevice(t *testing.T) (*Endpoint, int) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	must(t, unix.SetsockoptInt(fds[1], unix.SOL_SOCKET, unix.SO_SNDBUF, 1<<20))
	e := &Endpoint{cfg: Config{BatchSize: 8}, format: link.FormatIP, mtu: DefaultMTU, off: allOffloads,
		addrs: []netip.Addr{netip.MustParseAddr("10.0.0.2")}}
	e.f = os.NewFile(uintptr(fds[0]), "fake-tun")
	if e.rc, err = e.f.SyscallConn(); err != nil {
		t.Fatal(err)
	}
	e.rx.init(e)
	e.tx.init(e)
	t.Cleanup(func() { e.Close(); unix.Close(fds[1]) })
	return e, fds[1]
}

// TestReadCraftedVnetHeaders feeds Read virtio-net headers that contradict
// their frames (zero, huge and off-by-one gso_size, garbage hdr_len and
// csum fields, GSO types never offered, checksum offsets outside the
// frame, a read shorter than the header): nothing panics, each is dropped
// and counted, or split as its gso_size says, and the frame after them
// still arrives.
func TestReadCraftedVnetHeaders(t *testing.T) {
	e, w := fakeDevice(t)
	a, b := fakeHost("10.0.0.1"), fakeHost("10.0.0.2")
	frame := func(payload int) []byte {
		f, err := linktest.Frame(a, b, 0, payload)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	f := frame(1000) // 1044 bytes
	const hl = 28
	seg := uint16(len(f) - hl)
	super := slices.Clone(f) // four of f as one super-packet
	for range 3 {
		super = append(super, f[hl:]...)
	}
	binary.BigEndian.PutUint16(super[2:], uint16(len(super)))
	binary.BigEndian.PutUint16(super[24:], uint16(len(super)-20))
	vnet.SetIPv4Checksum(super[:20])
	partial := slices.Clone(f) // CHECKSUM_PARTIAL: the pseudo-header sum in the field
	binary.BigEndian.PutUint16(partial[26:], vnet.Fold(vnet.PseudoSum(partial, len(partial)-20)))
	l4 := uint8(vnet.GSOUDPL4)
	needs := uint8(vnet.FlagNeedsCsum)
	last := frame(77)
	for _, c := range []struct {
		h vnet.Hdr
		f []byte
	}{
		{vnet.Hdr{GSOType: l4}, super},                  // gso_size 0: malformed
		{vnet.Hdr{GSOType: l4, GSOSize: 0xFFFF}, super}, // one segment, over the 2048-byte buffer: too large
		{vnet.Hdr{Flags: 0xFF, GSOType: l4, GSOSize: seg, // 4 × 1044; hdr_len and csum fields ignored
			HdrLen: 0xFFFF, CsumStart: 0xFFFF, CsumOffset: 0xFFFF}, super},
		{vnet.Hdr{GSOType: l4 | vnet.GSOECN, GSOSize: seg - 1}, super},  // 4 × 1043 and 32
		{vnet.Hdr{GSOType: vnet.GSOTCPv4, GSOSize: seg}, super},         // never offered: malformed
		{vnet.Hdr{GSOType: 0x7F, GSOSize: seg}, super},                  // unknown: malformed
		{vnet.Hdr{GSOType: l4, GSOSize: seg}, super[:100]},              // lengths contradict: malformed
		{vnet.Hdr{GSOType: l4, GSOSize: seg}, super[:20]},               // no UDP: not RoCE
		{vnet.Hdr{Flags: needs, CsumStart: 0xFFFF, CsumOffset: 6}, f},   // past the end: malformed
		{vnet.Hdr{Flags: needs, CsumStart: 20, CsumOffset: 0xFFFF}, f},  // past the end: malformed
		{vnet.Hdr{Flags: needs, CsumStart: uint16(len(f) - 1)}, f},      // field cut by the end: malformed
		{vnet.Hdr{Flags: needs, CsumStart: 0, CsumOffset: 6}, f},        // inside the IP header: malformed
		{vnet.Hdr{Flags: needs, CsumStart: 20, CsumOffset: 6}, partial}, // finished: 1044
	} {
		m := make([]byte, vnet.HdrLen+len(c.f))
		c.h.Encode(m)
		copy(m[vnet.HdrLen:], c.f)
		must(t, unix.Send(w, m, 0))
	}
	must(t, unix.Send(w, []byte{1, 2, 3}, 0)) // shorter than the header: malformed
	m := make([]byte, vnet.HdrLen+len(last))
	copy(m[vnet.HdrLen:], last)
	must(t, unix.Send(w, m, 0))

	bufs := make([][]byte, 8)
	for i := range bufs {
		bufs[i] = make([]byte, 2048)
	}
	sizes := make([]int, len(bufs))
	wd := linktest.NewWatchdog(linktest.Timeout, e)
	defer wd.Stop()
	var got [][]byte
	for len(got) == 0 || len(got[len(got)-1]) != len(last) {
		n, err := e.Read(bufs, sizes, 0)
		if err != nil {
			t.Fatal(wd.Err(err, len(got), 11))
		}
		for i := range n {
			got = append(got, slices.Clone(bufs[i][:sizes[i]]))
		}
	}
	var lens []int
	for _, g := range got {
		lens = append(lens, len(g))
	}
	want := []int{1044, 1044, 1044, 1044, 1043, 1043, 1043, 1043, 32, 1044, len(last)}
	if !slices.Equal(lens, want) {
		t.Fatalf("frame lengths %v; want %v", lens, want)
	}
	// Segments and the finished frame carry full checksums; the last
	// frame came as it was (checksum 0, as linktest builds them).
	if !bytes.Equal(got[len(got)-1], last) {
		t.Errorf("last frame changed")
	}
	for i, g := range got[:len(got)-1] {
		if vnet.UDPChecksum(g) != binary.BigEndian.Uint16(g[26:]) {
			t.Errorf("frame %d: UDP checksum %#04x, want %#04x", i, binary.BigEndian.Uint16(g[26:]), vnet.UDPChecksum(g))
		}
	}
	if !bytes.Equal(got[9][hl:], f[hl:]) {
		t.Errorf("finished checksum frame differs in its payload")
	}
	st := e.Stats()
	if st.RxMalformed != 9 || st.RxTooLarge != 1 || st.RxNotRoCE != 1 || st.RxGSO != 3 ||
		st.RxGSOSegments != 9 || st.RxCsumPartial != 1 || st.RxFrames != uint64(len(want)) || st.RxErrors != 0 {
		t.Fatalf("stats %+v; want 9 malformed, 1 too large, 1 not RoCE, 3 super-packets of 9, 1 partial checksum, %d frames", st, len(want))
	}
}
