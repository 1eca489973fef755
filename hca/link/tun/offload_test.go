//go:build linux

package tun

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/hca/link"
	"github.com/goroce/goroce/hca/link/internal/vnet"
	"github.com/goroce/goroce/hca/link/linktest"
	"github.com/goroce/goroce/hca/netcfg"
	"github.com/goroce/goroce/wire"
)

var allOffloads = Offloads{VnetHdr: true, Csum: true, USO4: true, USO6: true}

// needUSO skips when the kernel does not grant USO (before Linux 6.2).
func needUSO(t testing.TB, e *Endpoint) {
	t.Helper()
	if o := e.Offloads(); !o.USO4 || !o.USO6 {
		t.Skipf("the kernel grants %+v: no UDP segmentation offload on TUN (Linux 6.2+)", o)
	}
}

func TestOffloads(t *testing.T) {
	ns := newNS(t)
	on := openIn(t, ns, Config{Addr: pfx("10.71.1.2/24"), KernelAddr: pfx("10.71.1.1/24")})
	needUSO(t, on)
	if o := on.Offloads(); o != allOffloads || !on.GSO() {
		t.Errorf("default: %+v, GSO %v; want %+v and GSO", o, on.GSO(), allOffloads)
	}
	off := openIn(t, ns, Config{Addr: pfx("10.71.2.2/24"), KernelAddr: pfx("10.71.2.1/24"), NoOffload: true})
	if o := off.Offloads(); o != (Offloads{}) || off.GSO() {
		t.Errorf("NoOffload: %+v, GSO %v; want none", o, off.GSO())
	}
	tap := openIn(t, ns, Config{Mode: TAP, Addr: pfx("10.71.3.2/24")})
	if o := tap.Offloads(); o != (Offloads{}) {
		t.Errorf("TAP: %+v; want none", o)
	}
}

// hairpinRoundTrip writes frames (payload bytes each, one run) through the
// hairpin and checks they all come back, in order, equivalent, with valid
// ICRCs and UDP checksums. It returns the frames read.
func hairpinRoundTrip(t *testing.T, h *hairpin, count, payload int) [][]byte {
	t.Helper()
	frames := make([][]byte, count)
	for i := range frames {
		frames[i] = h.frame(t, bth.PSN(i), payload)
	}
	if n, err := h.e.Write(frames, 0); n != count || err != nil {
		t.Fatalf("Write = %d, %v", n, err)
	}
	got := readN(t, h.e, count, 9000)
	for i, g := range got {
		checkFrame(t, i, g, frames[i])
	}
	return got
}

// readN reads n frames (watchdog: a lost frame fails, never hangs).
func readN(t *testing.T, e *Endpoint, n, bufLen int) [][]byte {
	t.Helper()
	bufs := make([][]byte, e.BatchSize())
	for i := range bufs {
		bufs[i] = make([]byte, bufLen)
	}
	sizes := make([]int, len(bufs))
	wd := linktest.NewWatchdog(linktest.Timeout, e)
	defer wd.Stop()
	var got [][]byte
	for len(got) < n {
		k, err := e.Read(bufs[:min(len(bufs), n-len(got))], sizes, 0)
		if err != nil {
			t.Fatal(wd.Err(err, len(got), n))
		}
		for i := range k {
			got = append(got, bytes.Clone(bufs[i][:sizes[i]]))
		}
	}
	return got
}

// checkFrame: got is want after the kernel (TTL, IPv4 ID and checksums may
// differ), its ICRC verifies, its UDP checksum is 0 or valid.
func checkFrame(t *testing.T, i int, got, want []byte) {
	t.Helper()
	var p wire.Packet
	if err := p.Decode(got, wire.FramingIP); err != nil {
		t.Fatalf("frame %d: %v\n%x", i, err, got)
	}
	if !linktest.Equivalent(got, want, link.FormatIP) {
		t.Fatalf("frame %d:\n got %x\nwant %x", i, got, want)
	}
	if bth.Header(got[p.BTHOff:]).PSN() != bth.Header(want[p.BTHOff:]).PSN() {
		t.Fatalf("frame %d out of order", i)
	}
	u := wire.IPv4Len
	if got[0]>>4 == 6 {
		u = wire.IPv6Len
	}
	if c := binary.BigEndian.Uint16(got[u+6:]); c != 0 && c != vnet.UDPChecksum(got) {
		t.Fatalf("frame %d: UDP checksum %#04x, want %#04x", i, c, vnet.UDPChecksum(got))
	}
}

// TestOffloadFallback plays kernels that refuse part of the offloads
// (through the test hooks around TUNGETFEATURES and TUNSETOFFLOAD): Open
// falls back to what is granted, and frames, super-packet sized batches
// included, still make the hairpin trip intact.
func TestOffloadFallback(t *testing.T) {
	refuse := func(mask int) func(int, int) error {
		return func(fd, flags int) error {
			if flags&mask != 0 || mask == -1 {
				return unix.EINVAL
			}
			return unix.IoctlSetInt(fd, unix.TUNSETOFFLOAD, flags)
		}
	}
	for _, tc := range []struct {
		name     string
		features func(int) (uint32, error)
		offload  func(int, int) error
		want     Offloads
	}{
		{"no USO", nil, refuse(unix.TUN_F_USO4 | unix.TUN_F_USO6), Offloads{VnetHdr: true, Csum: true}},
		{"no CSUM", nil, refuse(unix.TUN_F_CSUM), Offloads{VnetHdr: true}},
		{"TUNSETOFFLOAD refused", nil, refuse(-1), Offloads{VnetHdr: true}},
		{"no IFF_VNET_HDR", func(fd int) (uint32, error) {
			f, err := unix.IoctlGetUint32(fd, unix.TUNGETFEATURES)
			return f &^ unix.IFF_VNET_HDR, err
		}, nil, Offloads{}},
		{"TUNGETFEATURES refused", func(int) (uint32, error) { return 0, unix.EINVAL }, nil, Offloads{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gf, so := getFeatures, setOffload
			t.Cleanup(func() { getFeatures, setOffload = gf, so })
			if tc.features != nil {
				getFeatures = tc.features
			}
			if tc.offload != nil {
				setOffload = tc.offload
			}
			h := newHairpin(t, nil)
			if o := h.e.Offloads(); o != tc.want || h.e.GSO() {
				t.Fatalf("Offloads = %+v, GSO %v; want %+v, no GSO", o, h.e.GSO(), tc.want)
			}
			hairpinRoundTrip(t, h, 16, 4096)
			hairpinRoundTrip(t, h, 4, 100)
			if st := h.e.Stats(); st.TxGSO != 0 || st.RxGSO != 0 || st.RxMalformed != 0 {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}

// TestHairpinGSO: with offloads, a batch of 4 KiB packets leaves as
// super-packets, the kernel forwards them whole back into the same device
// (USO on it), and Read splits them: every frame comes back intact with an
// ICRC valid for the ID it now carries.
func TestHairpinGSO(t *testing.T) {
	h := newHairpin(t, nil)
	needUSO(t, h.e)
	got := hairpinRoundTrip(t, h, 40, 4096)
	st := h.e.Stats()
	if st.TxGSO == 0 || st.TxICRCPatched == 0 || st.RxGSO == 0 || st.RxGSOSegments != 40 || st.RxMalformed != 0 {
		t.Fatalf("stats %+v; want super-packets both ways", st)
	}
	// 4140-byte UDP payloads: 15 fit a 64 KiB IPv4 packet, so the runs
	// are 15, 15 and 10 packets with IDs 0.. from each run's first.
	for i, g := range got {
		if id := int(binary.BigEndian.Uint16(g[4:])); id != i%15 {
			t.Errorf("frame %d: IPv4 ID %d, want %d", i, id, i%15)
		}
	}
	// A short run goes in a power of two (a local raw-socket receiver must
	// tell it from one packet, vnet: short runs): 3 small packets as a
	// super-packet of 2 and one alone.
	hairpinRoundTrip(t, h, 3, 100)
	if st2 := h.e.Stats(); st2.TxGSO != st.TxGSO+1 || st2.RxGSOSegments != st.RxGSOSegments+2 {
		t.Fatalf("a run of 3 small packets: %d super-packets, %d segments received; want 1 and 2",
			st2.TxGSO-st.TxGSO, st2.RxGSOSegments-st.RxGSOSegments)
	}
}

// twoTUNs is one namespace, forwarding, with two TUNs: host A behind tunA
// (10.71.1.2 / fd71:1::2), host B behind tunB. What A writes to B the
// kernel receives on tunA, routes, and sends into tunB: with B's offloads
// off, a super-packet from A is segmented by the kernel's own software GSO
// on the way into tunB; with them on it arrives whole.
func twoTUNs(t *testing.T, v6 bool, modA, modB func(*Config)) (a, b *Endpoint) {
	t.Helper()
	ns := newNS(t)
	if v6 {
		sysctl(t, ns, "net/ipv6/conf/all/forwarding", "1")
	} else {
		sysctl(t, ns, "net/ipv4/ip_forward", "1")
		for _, k := range []string{"all", "default"} {
			sysctl(t, ns, "net/ipv4/conf/"+k+"/rp_filter", "0")
		}
	}
	p := plans[v6]
	ca := Config{Addr: p.hostA, KernelAddr: p.kernelA}
	cb := Config{Addr: p.hostB, KernelAddr: p.kernelB}
	if modA != nil {
		modA(&ca)
	}
	if modB != nil {
		modB(&cb)
	}
	return openIn(t, ns, ca), openIn(t, ns, cb)
}

// TestGSOThroughKernel is the ICRC check on a real kernel: A writes
// 64 KiB messages as super-packets; the kernel segments them (B without
// offloads: the IPv4 IDs, lengths, IP and UDP checksums of every segment
// are the kernel's) or forwards them whole for B to split. Every frame B
// reads must verify (wire.Packet.Decode checks the ICRC) and carry a valid
// UDP checksum.
func TestGSOThroughKernel(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		for _, bOffload := range []bool{false, true} {
			for _, payload := range []int{1024, 4096} {
				t.Run(fmt.Sprintf("v6=%v/B-offload=%v/payload=%d", v6, bOffload, payload), func(t *testing.T) {
					ea, eb := twoTUNs(t, v6, nil, func(c *Config) { c.NoOffload = !bOffload })
					needUSO(t, ea)
					count := 65536 / payload
					frames := make([][]byte, count)
					for i := range frames {
						f, err := linktest.Frame(ea, eb, bth.PSN(i), payload)
						if err != nil {
							t.Fatal(err)
						}
						frames[i] = f
					}
					for round := range 3 {
						if n, err := ea.Write(frames, 0); n != count || err != nil {
							t.Fatalf("round %d: Write = %d, %v", round, n, err)
						}
						for i, g := range readN(t, eb, count, 9000) {
							checkFrame(t, i, g, frames[i])
						}
					}
					sa, sb := ea.Stats(), eb.Stats()
					if sa.TxGSO == 0 || (!v6 && sa.TxICRCPatched == 0) {
						t.Errorf("A sent no super-packets: %+v", sa)
					}
					if bOffload != (sb.RxGSO > 0) || sb.RxMalformed != 0 || sb.RxTooLarge != 0 {
						t.Errorf("B: %+v", sb)
					}
					t.Logf("A %+v", sa)
					t.Logf("B %+v", sb)
				})
			}
		}
	}
}

// TestReadFromGSOSocket: a kernel UDP socket sends to the TUN host with
// UDP_SEGMENT (and a plain datagram, CHECKSUM_PARTIAL): with offloads Read
// gets the super-packet and splits it; without, the kernel segments. Both
// must give the same bytes: Read's split is the kernel's segmentation.
func TestReadFromGSOSocket(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		t.Run(fmt.Sprintf("v6=%v", v6), func(t *testing.T) {
			var got [2][][]byte
			for k, offload := range []bool{true, false} {
				ns := newNS(t)
				p := plans[v6]
				e := openIn(t, ns, Config{Addr: p.hostA, KernelAddr: p.kernelA, NoOffload: !offload})
				if offload {
					needUSO(t, e)
				}
				payload := make([]byte, 5*1000+300)
				for i := range payload {
					payload[i] = byte(i * 13)
				}
				err := ns.Do(func() error {
					return sendGSO(p.kernelA.Addr(), p.hostA.Addr(), payload, 1000)
				})
				if err != nil {
					t.Fatal(err)
				}
				got[k] = readN(t, e, 7, 2048)
				st := e.Stats()
				if offload && (st.RxGSO != 1 || st.RxGSOSegments != 6 || st.RxCsumPartial != 1) {
					t.Errorf("offload: %+v; want one super-packet of 6 and one partial checksum", st)
				}
				if !offload && (st.RxGSO != 0 || st.RxCsumPartial != 0) {
					t.Errorf("no offload: %+v", st)
				}
				for i, g := range got[k] {
					u := wire.IPv4Len
					if v6 {
						u = wire.IPv6Len
					}
					want := payload[min(i*1000, len(payload)):min(i*1000+1000, len(payload))]
					if i == 6 {
						want = payload[:100] // the plain datagram
					}
					if !bytes.Equal(g[u+8:], want) || vnet.UDPChecksum(g) != binary.BigEndian.Uint16(g[u+6:]) {
						t.Errorf("offload=%v frame %d: %d bytes, checksum %#04x want %#04x", offload, i,
							len(g), binary.BigEndian.Uint16(g[u+6:]), vnet.UDPChecksum(g))
					}
					if !v6 && vnet.Fold(vnet.Sum(0, g[:20])) != 0xFFFF {
						t.Errorf("frame %d: bad IPv4 header checksum", i)
					}
				}
			}
			// Two sockets in two namespaces: the IPv6 flow labels differ
			// (a per-namespace random hash); nothing else may.
			for i := range got[0] {
				a, b := got[0][i], got[1][i]
				if v6 {
					a, b = bytes.Clone(a), bytes.Clone(b)
					a[1], a[2], a[3] = a[1]&0xF0, 0, 0
					b[1], b[2], b[3] = b[1]&0xF0, 0, 0
				}
				if !bytes.Equal(a, b) {
					t.Errorf("frame %d: split by Read\n%x...\nsplit by the kernel\n%x...", i, a[:min(len(a), 80)], b[:min(len(b), 80)])
				}
			}
		})
	}
}

// sendGSO sends payload from src to dst:4791 as one UDP_SEGMENT datagram
// of seg-byte segments, then payload[:100] as a plain datagram, from a
// socket with IP_PMTUDISC_DO (IPv4 ID 0, then 0..n-1 per segment).
func sendGSO(src, dst netip.Addr, payload []byte, seg int) error {
	fam := unix.AF_INET
	if src.Is6() {
		fam = unix.AF_INET6
	}
	fd, err := unix.Socket(fam, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var sa, da unix.Sockaddr
	if src.Is6() {
		sa = &unix.SockaddrInet6{Addr: src.As16(), Port: gsoSrcPort}
		da = &unix.SockaddrInet6{Addr: dst.As16(), Port: wire.RoCEv2Port}
		err = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IPV6_PMTUDISC_DO)
	} else {
		sa = &unix.SockaddrInet4{Addr: src.As4(), Port: gsoSrcPort}
		da = &unix.SockaddrInet4{Addr: dst.As4(), Port: wire.RoCEv2Port}
		err = unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO)
	}
	if err != nil {
		return err
	}
	if err := bindRetry(fd, sa); err != nil {
		return err
	}
	oob := make([]byte, unix.CmsgSpace(2))
	h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
	h.Level, h.Type = unix.IPPROTO_UDP, unix.UDP_SEGMENT
	h.SetLen(unix.CmsgLen(2))
	binary.NativeEndian.PutUint16(oob[unix.CmsgLen(0):], uint16(seg))
	if err := unix.Sendmsg(fd, payload, oob, da, 0); err != nil {
		return fmt.Errorf("sendmsg UDP_SEGMENT: %w", err)
	}
	return unix.Sendto(fd, payload[:100], 0, da)
}

// gsoSrcPort is sendGSO's source port: fixed, so two runs send equal bytes.
const gsoSrcPort = 49999

// bindRetry binds, waiting out IPv6 duplicate address detection (the
// kernel address is tentative for a moment after Open).
func bindRetry(fd int, sa unix.Sockaddr) error {
	var err error
	for range 300 {
		if err = unix.Bind(fd, sa); err != unix.EADDRNOTAVAIL {
			return err
		}
		_, _ = unix.Select(0, nil, nil, nil, &unix.Timeval{Usec: 10000})
	}
	return err
}

// TestZeroAllocsGSO: super-packets out and in (the hairpin, 4 KiB
// packets) allocate nothing per Write and Read, also when a super-packet's
// segments are spread over several Reads (8-frame reads).
func TestZeroAllocsGSO(t *testing.T) {
	for _, readBatch := range []int{64, 8} {
		t.Run(fmt.Sprintf("read=%d", readBatch), func(t *testing.T) {
			h := newHairpin(t, nil)
			needUSO(t, h.e)
			frames := make([][]byte, 16)
			for i := range frames {
				frames[i] = h.frame(t, bth.PSN(i), 4096)
			}
			bufs := make([][]byte, readBatch)
			for i := range bufs {
				bufs[i] = make([]byte, 4200)
			}
			sizes := make([]int, len(bufs))
			wd := linktest.NewWatchdog(linktest.Timeout, h.e)
			defer wd.Stop()
			run := func() {
				if n, err := h.e.Write(frames, 0); n != len(frames) || err != nil {
					t.Fatalf("Write = %d, %v", n, err)
				}
				for got := 0; got < len(frames); {
					n, err := h.e.Read(bufs, sizes, 0)
					if err != nil {
						t.Fatal(wd.Err(err, got, len(frames)))
					}
					got += n
				}
			}
			run() // the ICRC basis for a new length is computed once
			if allocs := testing.AllocsPerRun(100, run); allocs != 0 {
				t.Fatalf("%v allocations per Write+Read of %d frames", allocs, len(frames))
			}
			if st := h.e.Stats(); st.TxGSO == 0 || st.RxGSO == 0 {
				t.Fatalf("no super-packets: %+v", st)
			}
		})
	}
}

// TestGSORefusedAtWrite: a kernel that granted USO but refuses a
// super-packet (EINVAL, played by refuseGSO) turns GSO off for good, and
// the refused run and the rest of the batch are resent packet by packet.
func TestGSORefusedAtWrite(t *testing.T) {
	h := newHairpin(t, nil)
	needUSO(t, h.e)
	refuseGSO = true
	t.Cleanup(func() { refuseGSO = false })
	hairpinRoundTrip(t, h, 40, 4096)
	if h.e.GSO() {
		t.Fatal("GSO still on after EINVAL")
	}
	hairpinRoundTrip(t, h, 40, 4096)
	if st := h.e.Stats(); st.TxGSO != 0 || st.TxErrors != 0 || st.TxFrames != 80 || st.RxFrames != 80 {
		t.Fatalf("stats %+v", st)
	}
}

// TestAttachLeavesNoOffloads: offloads are per device and outlive the fd,
// so closing an attached endpoint turns them off again. A plain reader
// attaching afterwards (no virtio-net header, no TUNSETOFFLOAD, like most
// TUN users) must get segmented packets, not a super-packet it cannot
// recognise.
func TestAttachLeavesNoOffloads(t *testing.T) {
	ns := newNS(t)
	persistent(t, ns, "grotun0", TUN)
	must(t, netcfg.SetUp(ns, "grotun0"))
	must(t, netcfg.AddAddr(ns, "grotun0", pfx("10.71.9.1/24")))
	e := openIn(t, ns, Config{Name: "grotun0", Addr: pfx("10.71.9.2/32"), Attach: true})
	needUSO(t, e)
	e.Close()
	var fd int
	err := ns.Do(func() (err error) {
		fd, err = unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		ifr, err := unix.NewIfreq("grotun0")
		if err != nil {
			return err
		}
		ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
		return unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	payload := make([]byte, 5300)
	buf := make([]byte, 65536)
	// Until the kernel's linkwatch puts the real qdisc back (up to a
	// second after the carrier came on), frames into the device are lost:
	// send again until something arrives.
	for try := 0; try < 30; try++ {
		if err := ns.Do(func() error {
			return sendGSO(netip.MustParseAddr("10.71.9.1"), netip.MustParseAddr("10.71.9.2"), payload, 1000)
		}); err != nil {
			t.Fatal(err)
		}
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		if n, _ := unix.Poll(pfd, 100); n == 0 {
			continue
		}
		for {
			n, err := unix.Read(fd, buf)
			if err != nil {
				break
			}
			if n > 20+8+1000 {
				t.Fatalf("a plain reader got a %d-byte packet: the device still offloads", n)
			}
		}
		return
	}
	t.Fatal("nothing arrived in 3 s")
}
