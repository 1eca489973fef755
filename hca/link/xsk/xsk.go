//go:build linux

package xsk

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

const (
	// ChunkSize is the UMEM chunk: one frame each.
	ChunkSize = 4096
	// headroom is what the kernel reserves before a received frame in a
	// chunk (XDP_PACKET_HEADROOM) in copy mode.
	headroom = 256
	// MaxFrame is the longest frame a chunk holds.
	MaxFrame = ChunkSize - headroom
	// DefaultRxFrames and DefaultTxFrames size the UMEM when Config
	// leaves them 0: 1024 received frames in flight (a 64 KiB message at
	// IB MTU 1024 is 64) and 512 to send, 6 MiB the kernel pins.
	DefaultRxFrames = 1024
	DefaultTxFrames = 512
	maxFrames       = 1 << 16
	// maxQueue is the largest queue id the kernel can bind: it keeps the
	// id in 16 bits (xsk_reg_pool_at_qid), so a larger one binds the
	// socket to the id modulo 65536 while the XSKMAP entry sits at the
	// full id, where the program (keyed by the queue a frame came in on)
	// never looks: a socket that receives nothing.
	maxQueue = 1<<16 - 1

	descSize = 16 // struct xdp_desc
	addrSize = 8  // a fill or completion ring entry
)

// Config configures Open.
type Config struct {
	// Ifindex and Queue name the interface and its receive queue (0 to
	// 65535). Frames the interface receives on other queues pass to the
	// stack.
	Ifindex int
	Queue   int
	// MAC is the interface's address: frames to any other pass.
	MAC net.HardwareAddr
	// Native attaches the program in the driver's XDP mode rather than
	// in generic (skb) mode.
	Native bool
	// RxFrames and TxFrames are the UMEM chunks for receiving and for
	// sending, powers of two; 0 means DefaultRxFrames / DefaultTxFrames.
	RxFrames, TxFrames int
	// BindWait is how long Open retries a bind that fails with EBUSY:
	// the kernel releases a closed socket's hold on the queue from a
	// work item, a moment after close (default 3 s).
	BindWait time.Duration
}

// Stats are the socket's counters.
type Stats struct {
	RxFrames uint64 // delivered by Recv
	// Every frame Send passes is in exactly one of TxFrames, TxDropped
	// and TxQueued (Send's comment says why).
	// TxFrames: taken from the TX ring by the kernel and not refused by
	// the device. Counted by Send when it finds them taken; a poll(2) on
	// the socket transmits too in copy mode, and a refusal there is not
	// seen (the frame counts here).
	TxFrames uint64
	TxKicks  uint64 // sendto system calls
	// TxDropped: never sent. Send gave up on them before queuing them
	// (the device was down, or no chunk came back for 100 ms), the
	// device refused them as the kernel took them (no carrier: EBUSY),
	// or they were in the TX ring when the socket lost its device
	// (ENXIO).
	TxDropped uint64
	// TxQueued is a gauge: frames in the TX ring the kernel has not
	// taken yet, left there by a kick that found the device down. They
	// cannot be taken back; the kernel sends them when the device is up
	// again, at the next kick, and they move to TxFrames then.
	TxQueued uint64
	// From the kernel (XDP_STATISTICS): frames redirected to the socket
	// but dropped because the RX ring was full or the fill ring empty,
	// and descriptors it found invalid.
	KernelRxDropped, KernelRxRingFull, KernelFillEmpty uint64
	KernelRxInvalid, KernelTxInvalid                   uint64
}

// Socket is an AF_XDP socket with its UMEM, rings and steering program.
type Socket struct {
	fd, mapFD, progFD, linkFD int
	umem                      []byte
	rx, tx, fill, comp        ring
	rxFrames, queue           int
	txFree                    []uint64 // chunks free to send from
	native                    bool

	rxDelivered                  atomic.Uint64
	txFrames, txKicks, txDropped atomic.Uint64
	// txAcct is the TX ring index up to which Send has counted frames
	// in txFrames or txDropped: from it to the producer they are
	// queued (Stats.TxQueued). txDown: the last kick found the device
	// down, so the next Send asks before queuing anything.
	txAcct atomic.Uint32
	txDown bool
}

// ring is one mapped ring: the producer and consumer indexes the kernel
// and we share, and the descriptors.
type ring struct {
	mem        []byte
	prod, cons *uint32
	flags      *uint32
	desc       unsafe.Pointer
	size       uint32
}

// ErrUnsupported wraps what a kernel without AF_XDP, eBPF or BPF links
// for XDP answers (EINVAL, EAFNOSUPPORT, EOPNOTSUPP, ENOSYS).
var ErrUnsupported = errors.New("the kernel has no AF_XDP sockets, XDP programs or XDP BPF links (Linux 5.9+ with CONFIG_XDP_SOCKETS)")

// ErrNoNativeXDP wraps EOPNOTSUPP from attaching the program in native
// mode (Config.Native): the interface's driver has no XDP of its own
// (dev_xdp_attach finds no ndo_bpf). Generic mode works on it.
var ErrNoNativeXDP = errors.New("the interface's driver has no native XDP mode (generic mode works on every driver)")

// ErrNotPermitted wraps EPERM and EACCES from the bpf and socket calls:
// not root, or a kernel that refuses eBPF even to root (lockdown, a
// seccomp filter).
var ErrNotPermitted = errors.New("loading an XDP program and opening an AF_XDP socket need root (CAP_NET_ADMIN, CAP_BPF or CAP_SYS_ADMIN, CAP_NET_RAW)")

// classify wraps err in ErrUnsupported or ErrNotPermitted when it is one
// of theirs.
func classify(what string, err error) error {
	switch {
	case unsupported(err):
		return fmt.Errorf("xsk: %s: %w (%w)", what, ErrUnsupported, err)
	case errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES):
		return fmt.Errorf("xsk: %s: %w (%w)", what, ErrNotPermitted, err)
	}
	return fmt.Errorf("xsk: %s: %w", what, err)
}

func unsupported(err error) bool {
	return errors.Is(err, unix.EAFNOSUPPORT) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EINVAL)
}

func bpf(cmd uintptr, attr []byte) (int, error) {
	r, _, e := unix.Syscall(unix.SYS_BPF, cmd, uintptr(unsafe.Pointer(&attr[0])), uintptr(len(attr)))
	if e != 0 {
		return -1, e
	}
	return int(r), nil
}

// progLoadAttempts is how many times loadProgram tries: the verifier gives
// up with EAGAIN when a signal is pending for the loading thread, and a Go
// process takes signals all the time (SIGURG preempts goroutines), so a
// load can fail for nothing, as it did once in a CI run under the race
// detector. libbpf retries the same way (PROG_LOAD_ATTEMPTS, 5).
const progLoadAttempts = 5

// loadProgram runs BPF_PROG_LOAD through sys, again on EAGAIN, up to
// progLoadAttempts times.
func loadProgram(sys func(cmd uintptr, attr []byte) (int, error), attr []byte) (int, error) {
	for attempt := 1; ; attempt++ {
		fd, err := sys(unix.BPF_PROG_LOAD, attr)
		if err != unix.EAGAIN || attempt == progLoadAttempts {
			return fd, err
		}
	}
}

func isPow2(n int) bool { return n > 0 && n&(n-1) == 0 }

// Open creates the socket, loads and attaches the program, and binds.
func Open(cfg Config) (*Socket, error) {
	if cfg.RxFrames == 0 {
		cfg.RxFrames = DefaultRxFrames
	}
	if cfg.TxFrames == 0 {
		cfg.TxFrames = DefaultTxFrames
	}
	if !isPow2(cfg.RxFrames) || !isPow2(cfg.TxFrames) || cfg.RxFrames+cfg.TxFrames > maxFrames {
		return nil, fmt.Errorf("xsk: %d RX and %d TX frames: want powers of two, %d in all at most", cfg.RxFrames, cfg.TxFrames, maxFrames)
	}
	if cfg.Queue < 0 || cfg.Queue > maxQueue {
		// Checked here: the XSKMAP is sized Queue+1, which the kernel
		// would refuse as EINVAL (read as ErrUnsupported) for -1, or
		// try to allocate at gigabytes for a huge id.
		return nil, fmt.Errorf("xsk: queue %d: want 0 to %d", cfg.Queue, maxQueue)
	}
	if cfg.BindWait == 0 {
		cfg.BindWait = 3 * time.Second
	}
	s := &Socket{fd: -1, mapFD: -1, progFD: -1, linkFD: -1, rxFrames: cfg.RxFrames, queue: cfg.Queue, native: cfg.Native}
	if err := s.open(cfg); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

func (s *Socket) open(cfg Config) error {
	// The XSKMAP: one entry per queue up to ours.
	mattr := make([]byte, 72)
	binary.NativeEndian.PutUint32(mattr[0:], unix.BPF_MAP_TYPE_XSKMAP)
	binary.NativeEndian.PutUint32(mattr[4:], 4)
	binary.NativeEndian.PutUint32(mattr[8:], 4)
	binary.NativeEndian.PutUint32(mattr[12:], uint32(cfg.Queue+1))
	var err error
	if s.mapFD, err = bpf(unix.BPF_MAP_CREATE, mattr); err != nil {
		return classify("XSKMAP", err)
	}
	code, err := steerProgram(s.mapFD, cfg.MAC, MaxFrame)
	if err != nil {
		return err
	}
	license := []byte("Dual MIT/GPL\x00")
	logBuf := make([]byte, 1<<16)
	pattr := make([]byte, 128)
	binary.NativeEndian.PutUint32(pattr[0:], unix.BPF_PROG_TYPE_XDP)
	binary.NativeEndian.PutUint32(pattr[4:], uint32(len(code)))
	binary.NativeEndian.PutUint64(pattr[8:], uint64(uintptr(unsafe.Pointer(&code[0]))))
	binary.NativeEndian.PutUint64(pattr[16:], uint64(uintptr(unsafe.Pointer(&license[0]))))
	binary.NativeEndian.PutUint32(pattr[24:], 1) // log level: the verifier says why it refuses
	binary.NativeEndian.PutUint32(pattr[28:], uint32(len(logBuf)))
	binary.NativeEndian.PutUint64(pattr[32:], uint64(uintptr(unsafe.Pointer(&logBuf[0]))))
	copy(pattr[48:64], "goroce_roce")
	binary.NativeEndian.PutUint32(pattr[68:], unix.BPF_XDP) // expected_attach_type
	if s.progFD, err = loadProgram(bpf, pattr); err != nil {
		n := 0
		for n < len(logBuf) && logBuf[n] != 0 {
			n++
		}
		return fmt.Errorf("%w (verifier: %q)", classify("loading the XDP program", err), string(logBuf[:n]))
	}
	if s.fd, err = unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0); err != nil {
		return classify("socket", err)
	}
	n := cfg.RxFrames + cfg.TxFrames
	if s.umem, err = unix.Mmap(-1, 0, n*ChunkSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE); err != nil {
		return fmt.Errorf("xsk: UMEM of %d bytes: %w", n*ChunkSize, err)
	}
	reg := unix.XDPUmemReg{Addr: uint64(uintptr(unsafe.Pointer(&s.umem[0]))), Len: uint64(len(s.umem)), Size: ChunkSize}
	if _, _, e := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(s.fd), unix.SOL_XDP, unix.XDP_UMEM_REG,
		uintptr(unsafe.Pointer(&reg)), unsafe.Sizeof(reg), 0); e != 0 {
		return fmt.Errorf("xsk: registering the UMEM: %w", e)
	}
	sizes := []struct{ opt, n int }{
		{unix.XDP_UMEM_FILL_RING, cfg.RxFrames}, {unix.XDP_RX_RING, cfg.RxFrames},
		{unix.XDP_UMEM_COMPLETION_RING, cfg.TxFrames}, {unix.XDP_TX_RING, cfg.TxFrames},
	}
	for _, z := range sizes {
		if err := unix.SetsockoptInt(s.fd, unix.SOL_XDP, z.opt, z.n); err != nil {
			return fmt.Errorf("xsk: ring size %d (option %d): %w", z.n, z.opt, err)
		}
	}
	var off unix.XDPMmapOffsets
	ol := uint32(unsafe.Sizeof(off))
	if _, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(s.fd), unix.SOL_XDP, unix.XDP_MMAP_OFFSETS,
		uintptr(unsafe.Pointer(&off)), uintptr(unsafe.Pointer(&ol)), 0); e != 0 {
		return fmt.Errorf("xsk: ring offsets: %w", e)
	}
	maps := []struct {
		r     *ring
		o     unix.XDPRingOffset
		pgoff int64
		n     int
		dsz   uint64
		name  string
	}{
		{&s.rx, off.Rx, unix.XDP_PGOFF_RX_RING, cfg.RxFrames, descSize, "RX"},
		{&s.tx, off.Tx, unix.XDP_PGOFF_TX_RING, cfg.TxFrames, descSize, "TX"},
		{&s.fill, off.Fr, unix.XDP_UMEM_PGOFF_FILL_RING, cfg.RxFrames, addrSize, "fill"},
		{&s.comp, off.Cr, unix.XDP_UMEM_PGOFF_COMPLETION_RING, cfg.TxFrames, addrSize, "completion"},
	}
	for _, m := range maps {
		mem, err := unix.Mmap(s.fd, m.pgoff, int(m.o.Desc+uint64(m.n)*m.dsz), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
		if err != nil {
			return fmt.Errorf("xsk: mapping the %s ring: %w", m.name, err)
		}
		r := m.r
		r.mem, r.size = mem, uint32(m.n)
		r.prod = (*uint32)(unsafe.Pointer(&mem[m.o.Producer]))
		r.cons = (*uint32)(unsafe.Pointer(&mem[m.o.Consumer]))
		r.flags = (*uint32)(unsafe.Pointer(&mem[m.o.Flags]))
		r.desc = unsafe.Pointer(&mem[m.o.Desc])
	}
	// Every receive chunk to the fill ring; the rest are ours to send.
	for i := range cfg.RxFrames {
		*s.fill.addr(uint32(i)) = uint64(i) * ChunkSize
	}
	atomic.StoreUint32(s.fill.prod, uint32(cfg.RxFrames))
	s.txFree = make([]uint64, 0, cfg.TxFrames)
	for i := range cfg.TxFrames {
		s.txFree = append(s.txFree, uint64(cfg.RxFrames+i)*ChunkSize)
	}
	sa := &unix.SockaddrXDP{Flags: unix.XDP_COPY, Ifindex: uint32(cfg.Ifindex), QueueID: uint32(cfg.Queue)}
	for deadline := time.Now().Add(cfg.BindWait); ; {
		err = unix.Bind(s.fd, sa)
		if err == nil || !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		if errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("xsk: binding to queue %d of interface %d: %w (another AF_XDP socket holds the queue)", cfg.Queue, cfg.Ifindex, err)
		}
		return fmt.Errorf("xsk: binding to queue %d of interface %d: %w", cfg.Queue, cfg.Ifindex, err)
	}
	uattr := make([]byte, 32)
	key, val := uint32(cfg.Queue), uint32(s.fd)
	binary.NativeEndian.PutUint32(uattr[0:], uint32(s.mapFD))
	binary.NativeEndian.PutUint64(uattr[8:], uint64(uintptr(unsafe.Pointer(&key))))
	binary.NativeEndian.PutUint64(uattr[16:], uint64(uintptr(unsafe.Pointer(&val))))
	if _, err := bpf(unix.BPF_MAP_UPDATE_ELEM, uattr); err != nil {
		return fmt.Errorf("xsk: XSKMAP entry: %w", err)
	}
	lattr := make([]byte, 64)
	mode := uint32(unix.XDP_FLAGS_SKB_MODE)
	if cfg.Native {
		mode = unix.XDP_FLAGS_DRV_MODE
	}
	binary.NativeEndian.PutUint32(lattr[0:], uint32(s.progFD))
	binary.NativeEndian.PutUint32(lattr[4:], uint32(cfg.Ifindex))
	binary.NativeEndian.PutUint32(lattr[8:], unix.BPF_XDP)
	binary.NativeEndian.PutUint32(lattr[12:], mode)
	if s.linkFD, err = bpf(unix.BPF_LINK_CREATE, lattr); err != nil {
		what := "generic"
		if cfg.Native {
			what = "native"
		}
		if errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("xsk: attaching the XDP program (%s mode) to interface %d: %w (the interface has an XDP program already)", what, cfg.Ifindex, err)
		}
		if cfg.Native && errors.Is(err, unix.EOPNOTSUPP) {
			// The kernel has BPF links for XDP (a kernel without them
			// answers EINVAL); this driver has no native mode.
			return fmt.Errorf("xsk: attaching the XDP program (native mode) to interface %d: %w (%w)", cfg.Ifindex, ErrNoNativeXDP, err)
		}
		return classify(fmt.Sprintf("attaching the XDP program (%s mode) to interface %d", what, cfg.Ifindex), err)
	}
	return nil
}

func (r *ring) addr(i uint32) *uint64 {
	return (*uint64)(unsafe.Add(r.desc, addrSize*uintptr(i&(r.size-1))))
}

func (r *ring) xdesc(i uint32) *unix.XDPDesc {
	return (*unix.XDPDesc)(unsafe.Add(r.desc, descSize*uintptr(i&(r.size-1))))
}

// FD is the socket's descriptor: poll(2) reports POLLIN when the RX ring
// holds a frame.
func (s *Socket) FD() int { return s.fd }

// Native reports whether the program runs in the driver's XDP mode.
func (s *Socket) Native() bool { return s.native }

// Ready reports whether the RX ring holds a frame (one atomic load).
func (s *Socket) Ready() bool {
	return atomic.LoadUint32(s.rx.prod) != atomic.LoadUint32(s.rx.cons)
}

// Recv copies up to len(bufs) received frames into bufs[i][off:], sets
// sizes[i], and returns how many it delivered; it never waits. A frame
// longer than its buffer ends the call and stays at the head of the ring
// (NextLen), for a call with a buffer that holds it; a buffer that off
// lies outside of (off negative, or past its end) holds none.
func (s *Socket) Recv(bufs [][]byte, sizes []int, off int) int {
	if off < 0 {
		return 0 // no buffer has room: every frame stays, as one too long would
	}
	cons := *s.rx.cons
	prod := atomic.LoadUint32(s.rx.prod) // acquire: the descriptors and frames before it are written
	if cons == prod {
		return 0 // an empty poll is this load: no store, no barrier
	}
	fp := *s.fill.prod
	n := 0
	for ; cons != prod && n < len(bufs) && n < len(sizes); cons++ {
		d := s.rx.xdesc(cons)
		a, l := d.Addr, uint64(d.Len)
		if a+l <= uint64(len(s.umem)) {
			if off > len(bufs[n]) || int(l) > len(bufs[n])-off {
				break
			}
			sizes[n] = copy(bufs[n][off:], s.umem[a:a+l])
			n++
		}
		*s.fill.addr(fp) = a &^ (ChunkSize - 1)
		fp++
	}
	atomic.StoreUint32(s.rx.cons, cons) // release: done reading those chunks
	atomic.StoreUint32(s.fill.prod, fp)
	s.rxDelivered.Add(uint64(n))
	return n
}

// NextLen returns the length of the frame at the head of the RX ring,
// which the next Recv delivers first, or 0 if the ring is empty.
func (s *Socket) NextLen() int {
	cons := *s.rx.cons
	if cons == atomic.LoadUint32(s.rx.prod) {
		return 0
	}
	return int(s.rx.xdesc(cons).Len)
}

// reclaim takes the chunks the kernel has sent from the completion ring.
func (s *Socket) reclaim() {
	cc := *s.comp.cons
	cp := atomic.LoadUint32(s.comp.prod)
	for ; cc != cp; cc++ {
		s.txFree = append(s.txFree, *s.comp.addr(cc))
	}
	atomic.StoreUint32(s.comp.cons, cc)
}

// ErrFrameTooLarge is returned (wrapped) by Send for a frame over
// MaxFrame.
var ErrFrameTooLarge = errors.New("xsk: frame longer than a UMEM chunk")

// Send copies frames[i][off:] into TX chunks, queues them and kicks the
// kernel until it has taken them all. It returns how many frames are past:
// each is counted once, in TxFrames when the kernel took it, in TxDropped
// when it is not sent (Stats), or, when the kick found the device down, in
// TxQueued until the kernel takes it. Frames over MaxFrame, and an offset
// outside a frame's buffer, are refused before anything is sent.
//
// A kick that fails because the device is down (ENETDOWN: the kernel
// checks IFF_UP before it looks at the ring) leaves the descriptors this
// call has just published in the TX ring, and there they stay: the
// producer index cannot be rewound, since the kernel caches the producer
// it read and may read the descriptors behind it at any time (a poll(2)
// on the socket transmits too, in copy mode), and rewriting a published
// descriptor to make the kernel skip it races with that read and leaves
// the chunk neither completed nor ours to reuse. The kernel sends them
// when the device is up again, at the next kick, as a NIC sends what its
// queue held: so they are counted as queued, not dropped (they used to be
// counted dropped, and went on the wire later). What this call has not
// copied into the ring yet is really dropped. Until a kick succeeds again,
// every Send first kicks with nothing new (which also sends what the ring
// holds if the device is back) and, if that fails too, drops its frames
// without queuing them, so that no more than one batch goes out late.
func (s *Socket) Send(frames [][]byte, off int) (int, error) {
	for i, f := range frames {
		if off < 0 || off > len(f) {
			return 0, fmt.Errorf("xsk: frame %d: offset %d outside its %d-byte buffer", i, off, len(f))
		}
		if len(f)-off > MaxFrame {
			return 0, fmt.Errorf("frame %d: %d bytes: %w", i, len(f)-off, ErrFrameTooLarge)
		}
	}
	if len(frames) == 0 {
		return 0, nil
	}
	if s.txDown {
		if err := s.kick(); err != nil {
			s.txDropped.Add(uint64(len(frames)))
			return len(frames), nil
		}
		s.txDown = false
	}
	done := 0
	var stall time.Time
	for done < len(frames) {
		s.reclaim()
		tp := *s.tx.prod
		k := 0
		for done+k < len(frames) && len(s.txFree) > 0 {
			a := s.txFree[len(s.txFree)-1]
			s.txFree = s.txFree[:len(s.txFree)-1]
			f := frames[done+k][off:]
			copy(s.umem[a:a+ChunkSize], f)
			d := s.tx.xdesc(tp)
			d.Addr, d.Len, d.Options = a, uint32(len(f)), 0
			tp++
			k++
		}
		if k > 0 {
			atomic.StoreUint32(s.tx.prod, tp) // release: descriptors and frames written
			stall = time.Time{}
		}
		done += k
		if err := s.kick(); err != nil {
			// The device is down: the k frames just queued stay in the
			// ring (TxQueued); the rest were never queued.
			s.txDown = true
			s.txDropped.Add(uint64(len(frames) - done))
			return len(frames), nil
		}
		if k == 0 {
			// Every chunk is still the kernel's: wait for completions.
			if stall.IsZero() {
				stall = time.Now()
			} else if time.Since(stall) > 100*time.Millisecond {
				s.txDropped.Add(uint64(len(frames) - done))
				return len(frames), nil
			}
		}
	}
	// In copy mode the kick has sent everything; reclaim so the next
	// Send starts with every chunk free.
	s.reclaim()
	return done, nil
}

// kick asks the kernel to send what the TX ring holds, and counts what it
// took (account). In copy mode it sends at most a batch per call (EAGAIN:
// more to do), so it kicks until the ring is empty. The sendto cannot
// sleep (MSG_DONTWAIT; copy mode transmits inside the call), so it is a
// raw system call, outside the Go scheduler's view: entersyscall/
// exitsyscall were ~450 of the ~10 000 instructions of a send_lat
// turnaround (callgrind), and a P marked "in a system call" draws sysmon's
// wake-ups (hca/link/udp's mmsgNow).
//
// An error means the device is down or gone (ENETDOWN, ENXIO, ENOBUFS) or
// an error of the kernel's: the system call that failed took nothing.
func (s *Socket) kick() error {
	refused, err := s.kicks()
	s.account(refused)
	if err == unix.ENXIO {
		// The socket lost its device (unregistered): the kernel never
		// reads the ring again, so what it holds is dropped.
		s.txDropped.Add(uint64(s.queued()))
		s.txAcct.Store(atomic.LoadUint32(s.tx.prod))
	}
	return err
}

// kicks is kick's system calls; it returns how many of them the device
// refused a frame in (EBUSY).
func (s *Socket) kicks() (refused int, err error) {
	for try := 0; try < 1000; try++ {
		s.txKicks.Add(1)
		_, _, e := unix.RawSyscall6(unix.SYS_SENDTO, uintptr(s.fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
		switch e {
		case 0:
		case unix.EBUSY:
			// The device dropped the frame the kernel took last
			// (__dev_direct_xmit's NET_XMIT_DROP: no carrier, or the
			// device is not running); the kernel completes its chunk
			// and stops. Kick again for the rest.
			refused++
		case unix.EAGAIN, unix.EINTR:
			// More than a batch queued, or the device queue was busy
			// (NETDEV_TX_BUSY: the kernel keeps the descriptor): kick
			// again once the kernel has made progress.
		case unix.ENOBUFS, unix.ENETDOWN, unix.ENXIO:
			return refused, e
		default:
			return refused, fmt.Errorf("xsk: sendto: %w", e)
		}
		if atomic.LoadUint32(s.tx.cons) == *s.tx.prod {
			return refused, nil
		}
	}
	return refused, nil // still busy: the next kick sends the rest
}

// account counts the frames the kernel has taken from the TX ring since
// the last call: refused of them (EBUSY) in txDropped, the rest in
// txFrames. The kernel may publish its consumer index after it reports a
// refusal, so a refusal counts as taken even before the index shows it.
func (s *Socket) account(refused int) {
	acct := s.txAcct.Load()
	taken := int64(int32(atomic.LoadUint32(s.tx.cons) - acct))
	if taken < int64(refused) {
		taken = int64(refused)
	}
	s.txDropped.Add(uint64(refused))
	s.txFrames.Add(uint64(taken) - uint64(refused))
	s.txAcct.Store(acct + uint32(taken))
}

// queued is how many frames are in the TX ring and counted in neither
// txFrames nor txDropped.
func (s *Socket) queued() int {
	return max(int(int32(atomic.LoadUint32(s.tx.prod)-s.txAcct.Load())), 0)
}

// TxFrames is Stats().TxFrames without the system call: for a caller that
// counts what went out.
func (s *Socket) TxFrames() uint64 { return s.txFrames.Load() }

// Stats returns the counters, with the kernel's read at the call.
func (s *Socket) Stats() Stats {
	st := Stats{RxFrames: s.rxDelivered.Load(),
		TxFrames: s.txFrames.Load(), TxKicks: s.txKicks.Load(), TxDropped: s.txDropped.Load()}
	if s.tx.mem != nil {
		st.TxQueued = uint64(s.queued())
	}
	if s.fd >= 0 {
		var ks unix.XDPStatistics
		l := uint32(unsafe.Sizeof(ks))
		if _, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(s.fd), unix.SOL_XDP, unix.XDP_STATISTICS,
			uintptr(unsafe.Pointer(&ks)), uintptr(unsafe.Pointer(&l)), 0); e == 0 {
			st.KernelRxDropped, st.KernelRxRingFull, st.KernelFillEmpty = ks.Rx_dropped, ks.Rx_ring_full, ks.Rx_fill_ring_empty_descs
			st.KernelRxInvalid, st.KernelTxInvalid = ks.Rx_invalid_descs, ks.Tx_invalid_descs
		}
	}
	return st
}

// Close detaches the program and releases the socket, its rings and the
// UMEM. No Recv or Send may be in progress.
func (s *Socket) Close() error {
	if s.linkFD >= 0 {
		unix.Close(s.linkFD) // detaches the program: frames pass from now on
		s.linkFD = -1
	}
	if s.mapFD >= 0 && s.fd >= 0 {
		// Drop the map's reference to the socket now rather than when
		// the map is freed after an RCU grace period.
		dattr := make([]byte, 32)
		key := uint32(s.queue)
		binary.NativeEndian.PutUint32(dattr[0:], uint32(s.mapFD))
		binary.NativeEndian.PutUint64(dattr[8:], uint64(uintptr(unsafe.Pointer(&key))))
		_, _ = bpf(unix.BPF_MAP_DELETE_ELEM, dattr)
	}
	for _, fd := range []*int{&s.fd, &s.progFD, &s.mapFD} {
		if *fd >= 0 {
			unix.Close(*fd)
			*fd = -1
		}
	}
	for _, r := range []*ring{&s.rx, &s.tx, &s.fill, &s.comp} {
		if r.mem != nil {
			_ = unix.Munmap(r.mem)
			r.mem = nil
		}
	}
	if s.umem != nil {
		_ = unix.Munmap(s.umem)
		s.umem = nil
	}
	return nil
}
