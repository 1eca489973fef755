//go:build linux

package xsk

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/hca/netcfg"
)

// frame builds an Ethernet frame from src to dst: ethertype et, and for
// IPv4/IPv6 a UDP datagram to port with payload bytes of pattern seed.
func frame(src, dst net.HardwareAddr, et uint16, sa, da netip.Addr, port uint16, payload int, seed byte) []byte {
	var f []byte
	f = append(f, dst...)
	f = append(f, src...)
	f = binary.BigEndian.AppendUint16(f, et)
	body := make([]byte, payload)
	for i := range body {
		body[i] = seed + byte(i*7)
	}
	udp := binary.BigEndian.AppendUint16(nil, 49152)
	udp = binary.BigEndian.AppendUint16(udp, port)
	udp = binary.BigEndian.AppendUint16(udp, uint16(8+payload))
	udp = append(udp, 0, 0)
	switch et {
	case etherTypeIPv4:
		ip := make([]byte, 20)
		ip[0], ip[8], ip[9] = 0x45, 64, 17
		binary.BigEndian.PutUint16(ip[2:], uint16(20+8+payload))
		binary.BigEndian.PutUint16(ip[6:], 0x4000)
		s4, d4 := sa.As4(), da.As4()
		copy(ip[12:], s4[:])
		copy(ip[16:], d4[:])
		var sum uint32
		for i := 0; i < 20; i += 2 {
			sum += uint32(binary.BigEndian.Uint16(ip[i:]))
		}
		sum = sum>>16 + sum&0xffff
		sum += sum >> 16
		binary.BigEndian.PutUint16(ip[10:], ^uint16(sum))
		f = append(append(append(f, ip...), udp...), body...)
	case etherTypeIPv6:
		ip := make([]byte, 40)
		ip[0], ip[6], ip[7] = 0x60, 17, 64
		binary.BigEndian.PutUint16(ip[4:], uint16(8+payload))
		s6, d6 := sa.As16(), da.As16()
		copy(ip[8:], s6[:])
		copy(ip[24:], d6[:])
		f = append(append(append(f, ip...), udp...), body...)
	default:
		f = append(f, body...)
	}
	return f
}

type end struct {
	s     *Socket
	host  netcfg.Host
	index int
}

func open(t *testing.T, h netcfg.Host, cfg Config) end {
	t.Helper()
	e := end{host: h}
	h.Do(t, func() error {
		ifc, err := net.InterfaceByName(h.Ifname)
		if err != nil {
			return err
		}
		e.index = ifc.Index
		cfg.Ifindex, cfg.MAC = ifc.Index, ifc.HardwareAddr
		e.s, err = Open(cfg)
		if errors.Is(err, ErrUnsupported) || errors.Is(err, ErrNotPermitted) {
			t.Skipf("AF_XDP: %v", err)
		}
		return err
	})
	t.Cleanup(func() { e.s.Close() })
	return e
}

// recvAll receives frames from s until it has n or the deadline passes.
func recvAll(s *Socket, n int, d time.Duration) [][]byte {
	var got [][]byte
	bufs := make([][]byte, 64)
	for i := range bufs {
		bufs[i] = make([]byte, ChunkSize)
	}
	sizes := make([]int, 64)
	for deadline := time.Now().Add(d); len(got) < n && time.Now().Before(deadline); {
		k := s.Recv(bufs, sizes, 0)
		for i := range k {
			got = append(got, bytes.Clone(bufs[i][:sizes[i]]))
		}
		if k == 0 {
			time.Sleep(100 * time.Microsecond)
		}
	}
	return got
}

// TestSteering sends every kind of frame from one AF_XDP socket to the
// other over a veth pair: the program must hand over exactly the RoCE
// frames to the peer's MAC that fit a chunk, byte for byte and in order,
// and pass everything else to the stack.
func TestSteering(t *testing.T) {
	for _, native := range []bool{false, true} {
		name := "generic"
		if native {
			name = "native"
		}
		t.Run(name, func(t *testing.T) {
			// Generic XDP takes a frame as long as a chunk holds; a
			// veth's native XDP only frames of a page less its
			// overheads, so its MTU stays 1500.
			mtu, longest := 4000, MaxFrame
			if native {
				mtu, longest = 1500, 1514
			}
			h := netcfg.TwoHosts(t, netcfg.TwoHostsOptions{IPv6: true, MTU: mtu})
			a := open(t, h.A, Config{Native: native, RxFrames: 64, TxFrames: 64})
			b := open(t, h.B, Config{Native: native, RxFrames: 64, TxFrames: 64})
			if a.s.Native() != native {
				t.Fatalf("Native() = %v", a.s.Native())
			}
			am, bm := h.A.MAC, h.B.MAC
			v4 := func(port uint16, n int, seed byte) []byte {
				return frame(am, bm, etherTypeIPv4, h.A.Addr, h.B.Addr, port, n, seed)
			}
			v6 := func(port uint16, n int, seed byte) []byte {
				return frame(am, bm, etherTypeIPv6, h.A.Addr6, h.B.Addr6, port, n, seed)
			}
			frag := v4(roceV2Port, 100, 9)
			frag[14+6] |= 0x20 // more fragments
			other := bytes.Clone(v4(roceV2Port, 100, 10))
			other[0] ^= 0x02 // another MAC
			want := [][]byte{
				v4(roceV2Port, 20, 1),
				v6(roceV2Port, 1000, 2),
				frame(am, bm, etherTypeRoCEv1, netip.Addr{}, netip.Addr{}, 0, 300, 3),
				v4(roceV2Port, longest-14-28, 4), // the longest frame
			}
			pass := [][]byte{v4(4792, 20, 5), v6(53, 20, 6), frag, other}
			n, err := a.s.Send(want[:2], 0)
			if err != nil || n != 2 {
				t.Fatalf("Send = %d, %v", n, err)
			}
			if n, err := a.s.Send(pass, 0); err != nil || n != len(pass) {
				t.Fatalf("Send = %d, %v", n, err)
			}
			if n, err := a.s.Send(want[2:], 0); err != nil || n != 2 {
				t.Fatalf("Send = %d, %v", n, err)
			}
			got := recvAll(b.s, len(want)+len(pass), 300*time.Millisecond)
			if len(got) != len(want) {
				t.Fatalf("received %d frames, want %d", len(got), len(want))
			}
			for i := range want {
				if !bytes.Equal(got[i], want[i]) {
					t.Fatalf("frame %d: got %d bytes % x..., want %d bytes % x...", i, len(got[i]), got[i][:min(40, len(got[i]))], len(want[i]), want[i][:40])
				}
			}
			st := a.s.Stats()
			if st.TxFrames != uint64(len(want)+len(pass)) || st.TxDropped != 0 {
				t.Fatalf("sender stats %+v", st)
			}
			if st := b.s.Stats(); st.RxFrames != uint64(len(want)) || st.KernelRxDropped+st.KernelRxRingFull+st.KernelRxInvalid != 0 {
				t.Fatalf("receiver stats %+v", st)
			}
			// Too long for a chunk: refused before anything is sent.
			if n, err := a.s.Send([][]byte{want[0], make([]byte, MaxFrame+1)}, 0); !errors.Is(err, ErrFrameTooLarge) || n != 0 {
				t.Fatalf("Send of a %d-byte frame = %d, %v; want ErrFrameTooLarge", MaxFrame+1, n, err)
			}
		})
	}
}

// TestOverChunkPasses: a frame longer than a chunk holds is the stack's,
// not dropped by the socket: a packet socket on the receiving interface
// still sees it.
func TestOverChunkPasses(t *testing.T) {
	h := netcfg.TwoHosts(t, netcfg.TwoHostsOptions{MTU: 9000})
	a := open(t, h.A, Config{RxFrames: 64, TxFrames: 64})
	b := open(t, h.B, Config{RxFrames: 64, TxFrames: 64})
	var ps int
	h.B.Do(t, func() error {
		var err error
		ps, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
		if err != nil {
			return err
		}
		if err := unix.SetsockoptTimeval(ps, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 1}); err != nil {
			return err
		}
		return unix.Bind(ps, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: b.index})
	})
	defer unix.Close(ps)
	big := frame(h.A.MAC, h.B.MAC, etherTypeIPv4, h.A.Addr, h.B.Addr, roceV2Port, 6000, 7)
	// The XSK cannot send it either: send it from a packet socket on A.
	h.A.Do(t, func() error {
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		return unix.Sendto(fd, big, 0, &unix.SockaddrLinklayer{Ifindex: a.index, Halen: 6, Addr: [8]byte{h.B.MAC[0], h.B.MAC[1], h.B.MAC[2], h.B.MAC[3], h.B.MAC[4], h.B.MAC[5]}})
	})
	buf := make([]byte, 16384)
	for {
		n, _, err := unix.Recvfrom(ps, buf, 0)
		if err != nil {
			t.Fatalf("the packet socket did not see the %d-byte frame: %v", len(big), err)
		}
		if bytes.Equal(buf[:n], big) {
			break
		}
	}
	if got := recvAll(b.s, 1, 50*time.Millisecond); len(got) != 0 {
		t.Fatalf("the socket received %d frames, want none", len(got))
	}
}

// TestReopen: closing a socket frees its queue for the next one (the
// kernel releases it from a work item: Open waits for it).
func TestReopen(t *testing.T) {
	h := netcfg.TwoHosts(t, netcfg.TwoHostsOptions{})
	for i := range 3 {
		h.A.Do(t, func() error {
			ifc, err := net.InterfaceByName(h.A.Ifname)
			if err != nil {
				return err
			}
			s, err := Open(Config{Ifindex: ifc.Index, MAC: ifc.HardwareAddr, RxFrames: 64, TxFrames: 64})
			if errors.Is(err, ErrUnsupported) || errors.Is(err, ErrNotPermitted) {
				t.Skipf("AF_XDP: %v", err)
			}
			if err != nil {
				t.Fatalf("open %d: %v", i, err)
			}
			return s.Close()
		})
	}
}

// TestConfigErrors: sizes that are not powers of two are refused by name.
func TestConfigErrors(t *testing.T) {
	for _, c := range []Config{{RxFrames: 100}, {TxFrames: 3}, {RxFrames: 1 << 16, TxFrames: 1}} {
		if _, err := Open(c); err == nil {
			t.Fatalf("Open(%+v) succeeded", c)
		}
	}
}

// TestProgram checks the assembled program's shape: every jump lands
// inside it, and it ends in an exit.
func TestProgram(t *testing.T) {
	code, err := steerProgram(3, net.HardwareAddr{2, 0, 0, 0, 0, 1}, MaxFrame)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range code {
		op := uint8(c)
		if cls := op & 7; (cls == clsJMP || cls == clsJMP32) && op&0xf0 != opCALL && op&0xf0 != opEXIT {
			off := int(int16(uint16(c >> 16)))
			if to := i + 1 + off; to <= i || to >= len(code) {
				t.Fatalf("instruction %d jumps to %d (of %d)", i, to, len(code))
			}
		}
	}
	if uint8(code[len(code)-1]) != clsJMP|opEXIT {
		t.Fatal("the program does not end in an exit")
	}
	if _, err := steerProgram(3, net.HardwareAddr{1, 2, 3}, MaxFrame); err == nil {
		t.Fatal("a 3-byte hardware address was accepted")
	}
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// TestLoadProgramRetriesEAGAIN: the verifier's EAGAIN (a signal was
// pending) is tried again, up to progLoadAttempts times; other errors are
// not.
func TestLoadProgramRetriesEAGAIN(t *testing.T) {
	for _, c := range []struct {
		name     string
		errs     []error // what the attempts return, in order; then success
		wantFD   int
		wantErr  error
		wantRuns int
	}{
		{"first time", nil, 7, nil, 1},
		{"after four EAGAINs", []error{unix.EAGAIN, unix.EAGAIN, unix.EAGAIN, unix.EAGAIN}, 7, nil, 5},
		{"EAGAIN every time", []error{unix.EAGAIN, unix.EAGAIN, unix.EAGAIN, unix.EAGAIN, unix.EAGAIN, unix.EAGAIN}, -1, unix.EAGAIN, progLoadAttempts},
		{"EPERM", []error{unix.EPERM}, -1, unix.EPERM, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			runs := 0
			fd, err := loadProgram(func(cmd uintptr, attr []byte) (int, error) {
				if cmd != unix.BPF_PROG_LOAD || len(attr) != 3 {
					t.Fatalf("called with command %d and %d bytes", cmd, len(attr))
				}
				runs++
				if runs <= len(c.errs) {
					return -1, c.errs[runs-1]
				}
				return 7, nil
			}, make([]byte, 3))
			if fd != c.wantFD || err != c.wantErr || runs != c.wantRuns {
				t.Fatalf("fd %d, err %v after %d attempts; want %d, %v after %d", fd, err, runs, c.wantFD, c.wantErr, c.wantRuns)
			}
		})
	}
}

// TestRecvLongFrameWaits: a frame longer than its buffer ends Recv and
// stays at the head of the ring (NextLen says how long it is), so that
// the caller can take it into a larger buffer; nothing is dropped and
// the frames behind it keep their order.
func TestRecvLongFrameWaits(t *testing.T) {
	h := netcfg.TwoHosts(t, netcfg.TwoHostsOptions{})
	a := open(t, h.A, Config{RxFrames: 64, TxFrames: 64})
	b := open(t, h.B, Config{RxFrames: 64, TxFrames: 64})
	v4 := func(n int, seed byte) []byte {
		return frame(h.A.MAC, h.B.MAC, etherTypeIPv4, h.A.Addr, h.B.Addr, roceV2Port, n, seed)
	}
	want := [][]byte{v4(20, 1), v4(1000, 2), v4(20, 3)}
	if n, err := a.s.Send(want, 0); err != nil || n != len(want) {
		t.Fatalf("Send = %d, %v", n, err)
	}
	small := [][]byte{make([]byte, 100), make([]byte, 100), make([]byte, 100)}
	sizes := make([]int, 3)
	var n int
	for deadline := time.Now().Add(300 * time.Millisecond); n == 0 && time.Now().Before(deadline); {
		n = b.s.Recv(small, sizes, 0)
	}
	if n != 1 || !bytes.Equal(small[0][:sizes[0]], want[0]) {
		t.Fatalf("Recv into 100-byte buffers = %d frames; want only the first", n)
	}
	for deadline := time.Now().Add(300 * time.Millisecond); b.s.NextLen() == 0 && time.Now().Before(deadline); {
	}
	if l := b.s.NextLen(); l != len(want[1]) {
		t.Fatalf("NextLen = %d, want %d", l, len(want[1]))
	}
	if k := b.s.Recv(small[1:], sizes[1:], 0); k != 0 {
		t.Fatalf("Recv again into 100-byte buffers = %d frames, want 0", k)
	}
	got := recvAll(b.s, 2, 300*time.Millisecond)
	if len(got) != 2 || !bytes.Equal(got[0], want[1]) || !bytes.Equal(got[1], want[2]) {
		t.Fatalf("then %d frames, want the long one and the last, in order", len(got))
	}
	if l := b.s.NextLen(); l != 0 {
		t.Fatalf("NextLen of an empty ring = %d", l)
	}
}

// TestQueueRange: a queue id outside what the kernel binds is refused by
// name, before anything is created: -1 made an XSKMAP of 0 entries, whose
// EINVAL read as ErrUnsupported, and 65536 bound queue 0 (the kernel keeps
// 16 bits of it) under an XSKMAP entry the program never looks up, so Open
// succeeded with a socket that could receive nothing.
func TestQueueRange(t *testing.T) {
	h := netcfg.TwoHosts(t, netcfg.TwoHostsOptions{})
	h.A.Do(t, func() error {
		ifc, err := net.InterfaceByName(h.A.Ifname)
		if err != nil {
			return err
		}
		for _, q := range []int{-1, -2, 65536, 1 << 20} {
			s, err := Open(Config{Ifindex: ifc.Index, MAC: ifc.HardwareAddr, Queue: q, RxFrames: 64, TxFrames: 64})
			if err == nil {
				s.Close()
				t.Errorf("Open on queue %d succeeded", q)
				continue
			}
			if want := fmt.Sprintf("xsk: queue %d: want 0 to %d", q, 65535); err.Error() != want {
				t.Errorf("queue %d: %v, want %q", q, err, want)
			}
		}
		return nil
	})
}

// TestNativeUnsupported: native mode on an interface whose driver has no
// XDP of its own (lo) fails with ErrNoNativeXDP, not with ErrUnsupported,
// which says the kernel has no AF_XDP at all (and makes callers skip), and
// leaves no descriptor open.
func TestNativeUnsupported(t *testing.T) {
	h := netcfg.TwoHosts(t, netcfg.TwoHostsOptions{})
	h.A.Do(t, func() error {
		if err := netcfg.SetUp(nil, "lo"); err != nil {
			return err
		}
		lo, err := net.InterfaceByName("lo")
		if err != nil {
			return err
		}
		mac := make(net.HardwareAddr, 6) // lo's: all zeros
		cfg := Config{Ifindex: lo.Index, MAC: mac, RxFrames: 64, TxFrames: 64}
		s, err := Open(cfg)
		if errors.Is(err, ErrUnsupported) || errors.Is(err, ErrNotPermitted) {
			t.Skipf("AF_XDP: %v", err)
		}
		if err != nil {
			return fmt.Errorf("generic mode on lo: %w", err)
		}
		s.Close()
		fds := openFDs(t)
		cfg.Native = true
		s, err = Open(cfg)
		if err == nil {
			s.Close()
			t.Skip("lo takes native XDP on this kernel")
		}
		if !errors.Is(err, ErrNoNativeXDP) || errors.Is(err, ErrUnsupported) || !errors.Is(err, unix.EOPNOTSUPP) {
			t.Errorf("native mode on lo: %v; want ErrNoNativeXDP (EOPNOTSUPP), not ErrUnsupported", err)
		}
		if n := openFDs(t); n != fds {
			t.Errorf("%d descriptors open after the failed Open, %d before", n, fds)
		}
		return nil
	})
}

// openFDs counts the process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// TestBadOffset: an offset outside the caller's buffers is refused by
// Send with an error, nothing sent, and leaves Recv no room (the frame
// stays at the head of the ring), where both sliced past the buffer and
// panicked.
func TestBadOffset(t *testing.T) {
	h := netcfg.TwoHosts(t, netcfg.TwoHostsOptions{})
	a := open(t, h.A, Config{RxFrames: 64, TxFrames: 64})
	b := open(t, h.B, Config{RxFrames: 64, TxFrames: 64})
	f := frame(h.A.MAC, h.B.MAC, etherTypeIPv4, h.A.Addr, h.B.Addr, roceV2Port, 100, 1)
	for _, off := range []int{-1, len(f) + 1} {
		if n, err := a.s.Send([][]byte{f}, off); n != 0 || err == nil || !strings.Contains(err.Error(), "offset") {
			t.Errorf("Send at offset %d = %d, %v; want 0 and an error naming the offset", off, n, err)
		}
	}
	if st := a.s.Stats(); st.TxFrames != 0 || st.TxKicks != 0 {
		t.Fatalf("refused Sends queued frames: %+v", st)
	}
	if n, err := a.s.Send([][]byte{f}, 0); n != 1 || err != nil {
		t.Fatalf("Send = %d, %v", n, err)
	}
	for deadline := time.Now().Add(5 * time.Second); b.s.NextLen() == 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if l := b.s.NextLen(); l != len(f) {
		t.Fatalf("NextLen = %d, want %d", l, len(f))
	}
	buf := [][]byte{make([]byte, ChunkSize)}
	sizes := []int{0}
	for _, off := range []int{-1, ChunkSize + 1} {
		if n := b.s.Recv(buf, sizes, off); n != 0 {
			t.Fatalf("Recv at offset %d = %d", off, n)
		}
	}
	if n := b.s.Recv(buf, sizes, 0); n != 1 || !bytes.Equal(buf[0][:sizes[0]], f) {
		t.Fatalf("Recv = %d: the frame did not stay at the head of the ring", n)
	}
}

// capture opens a packet socket on h's interface (index) that sees every
// frame it receives.
func capture(t *testing.T, h netcfg.Host, index int) int {
	t.Helper()
	var ps int
	h.Do(t, func() error {
		var err error
		ps, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
		if err != nil {
			return err
		}
		if err := unix.SetsockoptTimeval(ps, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 20000}); err != nil {
			unix.Close(ps)
			return err
		}
		if err := unix.Bind(ps, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: index}); err != nil {
			unix.Close(ps)
			return err
		}
		return nil
	})
	t.Cleanup(func() { unix.Close(ps) })
	return ps
}

// captured reads ps until last has arrived (and a little longer, for
// anything behind it) or d has passed, and returns the indexes into sent
// of the frames that arrived, in arrival order; other frames (the stack's
// own) are skipped.
func captured(t *testing.T, ps int, sent [][]byte, last []byte, d time.Duration) []int {
	t.Helper()
	var got []int
	buf := make([]byte, 16384)
	var quiet time.Time
	for deadline := time.Now().Add(d); time.Now().Before(deadline) && (quiet.IsZero() || time.Now().Before(quiet)); {
		n, _, err := unix.Recvfrom(ps, buf, 0)
		if err != nil {
			// ENETDOWN: the socket's report (once) that the interface
			// went down while it was open.
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) || errors.Is(err, unix.ENETDOWN) {
				continue
			}
			t.Fatalf("capture: %v", err)
		}
		for i, f := range sent {
			if bytes.Equal(buf[:n], f) {
				got = append(got, i)
				if bytes.Equal(f, last) && quiet.IsZero() {
					quiet = time.Now().Add(100 * time.Millisecond)
				}
				break
			}
		}
	}
	return got
}

// downPair is TestSendWhileDown's veth pair: a socket with a 64-frame TX
// ring on A, and a capture on B.
func downPair(t *testing.T) (*netcfg.Hosts, end, int) {
	t.Helper()
	h := netcfg.TwoHosts(t, netcfg.TwoHostsOptions{})
	a := open(t, h.A, Config{RxFrames: 64, TxFrames: 64})
	var bIndex int
	h.B.Do(t, func() error {
		ifc, err := net.InterfaceByName(h.B.Ifname)
		bIndex = ifc.Index
		return err
	})
	return h, a, capture(t, h.B, bIndex)
}

// TestSendWhileDown: frames Send counts in TxDropped never reach the
// wire, and every frame it counts in TxFrames (or TxQueued, until the
// device is back) does (a veth loses none), when the device goes down
// under Send. A kick on a device that is down (ENETDOWN) leaves the
// descriptors already in the TX ring there, and the kernel sends them
// once it is up again: Send counted them dropped, and TxFrames never
// counted them. A device without carrier (the veth's peer is down) takes
// the descriptors and drops each frame (EBUSY): Send counted them sent.
func TestSendWhileDown(t *testing.T) {
	t.Run("own side down", func(t *testing.T) {
		h, a, ps := downPair(t)
		var sent [][]byte
		batch := func(n int) [][]byte {
			b := make([][]byte, n)
			for i := range b {
				b[i] = frame(h.A.MAC, h.B.MAC, etherTypeIPv4, h.A.Addr, h.B.Addr, roceV2Port, 64, byte(len(sent)))
				sent = append(sent, b[i])
			}
			return b
		}
		send := func(b [][]byte) {
			t.Helper()
			if n, err := a.s.Send(b, 0); n != len(b) || err != nil {
				t.Fatalf("Send of %d frames = %d, %v", len(b), n, err)
			}
		}
		setDown := func(down bool) {
			t.Helper()
			f := netcfg.SetUp
			if down {
				f = netcfg.SetDown
			}
			if err := f(h.A.NS, h.A.Ifname); err != nil {
				t.Fatal(err)
			}
		}
		// Down, then more frames than the TX ring holds (64): the ring's
		// 64 stay queued and go out once the device is up again, the
		// other 16 and the next batch are dropped.
		setDown(true)
		send(batch(80))
		send(batch(10))
		if st := a.s.Stats(); st.TxFrames != 0 || st.TxDropped != 26 || st.TxQueued != 64 {
			t.Errorf("while down: TxFrames %d, TxDropped %d, TxQueued %d; want 0, 26, 64", st.TxFrames, st.TxDropped, st.TxQueued)
		}
		setDown(false)
		last := batch(1)
		send(last)
		got := captured(t, ps, sent, last[0], 2*time.Second)
		want := make([]int, 0, 66)
		for i := range 64 {
			want = append(want, i)
		}
		want = append(want, 90)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("arrived: %v\nwant:    %v", got, want)
		}
		// Down again with chunks free: the first Send queues its frames
		// (the kick finds the device down only after they are in the
		// ring), the next ones are dropped without being queued.
		setDown(true)
		send(batch(30))
		send(batch(20))
		if st := a.s.Stats(); st.TxFrames != 65 || st.TxDropped != 46 || st.TxQueued != 30 {
			t.Errorf("down again: TxFrames %d, TxDropped %d, TxQueued %d; want 65, 46, 30", st.TxFrames, st.TxDropped, st.TxQueued)
		}
		setDown(false)
		last = batch(1)
		send(last)
		got = captured(t, ps, sent, last[0], 2*time.Second)
		want = want[:0]
		for i := 91; i < 121; i++ {
			want = append(want, i)
		}
		want = append(want, 141)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("arrived: %v\nwant:    %v", got, want)
		}
		st := a.s.Stats()
		if st.TxFrames != 96 || st.TxDropped != 46 || st.TxQueued != 0 || st.TxFrames+st.TxDropped != uint64(len(sent)) {
			t.Errorf("TxFrames %d, TxDropped %d, TxQueued %d; want 96, 46, 0 for the %d frames sent", st.TxFrames, st.TxDropped, st.TxQueued, len(sent))
		}
	})
	t.Run("peer down", func(t *testing.T) {
		h, a, ps := downPair(t)
		var sent [][]byte
		for i := range 11 {
			sent = append(sent, frame(h.A.MAC, h.B.MAC, etherTypeIPv4, h.A.Addr, h.B.Addr, roceV2Port, 64, byte(i)))
		}
		if err := netcfg.SetDown(h.B.NS, h.B.Ifname); err != nil {
			t.Fatal(err)
		}
		if n, err := a.s.Send(sent[:10], 0); n != 10 || err != nil {
			t.Fatalf("Send = %d, %v", n, err)
		}
		down := a.s.Stats()
		if err := netcfg.SetUp(h.B.NS, h.B.Ifname); err != nil {
			t.Fatal(err)
		}
		if n, err := a.s.Send(sent[10:], 0); n != 1 || err != nil {
			t.Fatalf("Send = %d, %v", n, err)
		}
		got := captured(t, ps, sent, sent[10], 2*time.Second)
		if fmt.Sprint(got) != "[10]" {
			t.Errorf("arrived: %v, want only the frame sent after the peer came up: [10]", got)
		}
		if down.TxFrames != 0 || down.TxDropped != 10 || down.TxQueued != 0 {
			t.Errorf("peer down: TxFrames %d, TxDropped %d, TxQueued %d; want 0, 10, 0", down.TxFrames, down.TxDropped, down.TxQueued)
		}
		if st := a.s.Stats(); st.TxFrames != 1 || st.TxDropped != 10 || st.TxQueued != 0 {
			t.Errorf("TxFrames %d, TxDropped %d, TxQueued %d; want 1, 10, 0", st.TxFrames, st.TxDropped, st.TxQueued)
		}
	})
}
