package transporttest

import (
	"container/heap"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/transport"
)

// GuardLen is the number of guard bytes on each side of an MR buffer.
const GuardLen = 64

// guardByte fills the guard zones; GuardsIntact checks them.
const guardByte = 0xA5

// Errors returned by Memory.
var (
	ErrBadKey    = errors.New("transporttest: unknown or invalid key")
	ErrBadPD     = errors.New("transporttest: MR belongs to another PD")
	ErrBadRange  = errors.New("transporttest: range outside the MR")
	ErrBadAccess = errors.New("transporttest: access not allowed by the MR")
)

// MR is a registered memory region over a Go byte slice.
type MR struct {
	PD     uint32
	Addr   uint64 // virtual address of Buf[0]
	Buf    []byte // the registered bytes
	Access transport.Access
	LKey   bth.LKey
	RKey   bth.RKey
	full   []byte // Buf with GuardLen bytes either side
	valid  bool
	rvalid bool // R_Key valid (SEND_WITH_INV invalidates it)
}

// SGE returns an SGE for [off, off+n) of the MR.
func (m *MR) SGE(off, n int) transport.SGE {
	return transport.SGE{Addr: m.Addr + uint64(off), Length: uint32(n), LKey: m.LKey}
}

// Memory is an MR table implementing transport.Memory. Keys follow rxe:
// index << 8 | key byte.
type Memory struct {
	mu    sync.Mutex
	mrs   map[uint32]*MR // by index
	rkeys map[bth.RKey]*MR
	next  uint32
}

// NewMemory returns an empty MR table.
func NewMemory() *Memory {
	return &Memory{mrs: make(map[uint32]*MR), rkeys: make(map[bth.RKey]*MR), next: 1}
}

// Register allocates size bytes with guard zones and registers them in pd.
func (m *Memory) Register(pd uint32, size int, access transport.Access) *MR {
	m.mu.Lock()
	idx := m.next
	m.mu.Unlock()
	return m.RegisterAt(pd, uint64(idx)<<32|0x1000, bth.RKey(idx<<8|0x22), size, access)
}

// RegisterAt registers size bytes at virtual address addr with R_Key rkey
// (to replay a capture's addresses and keys).
func (m *Memory) RegisterAt(pd uint32, addr uint64, rkey bth.RKey, size int, access transport.Access) *MR {
	m.mu.Lock()
	defer m.mu.Unlock()
	idx := m.next
	m.next++
	full := make([]byte, size+2*GuardLen)
	for i := 0; i < GuardLen; i++ {
		full[i] = guardByte
		full[GuardLen+size+i] = guardByte
	}
	mr := &MR{
		PD: pd, Addr: addr, Buf: full[GuardLen : GuardLen+size : GuardLen+size],
		Access: access, LKey: bth.LKey(idx<<8 | 0x11), RKey: rkey,
		full: full, valid: true, rvalid: true,
	}
	m.mrs[idx] = mr
	m.rkeys[rkey] = mr
	return mr
}

// Deregister removes mr.
func (m *Memory) Deregister(mr *MR) {
	m.mu.Lock()
	defer m.mu.Unlock()
	mr.valid = false
	delete(m.mrs, uint32(mr.LKey)>>8)
	delete(m.rkeys, mr.RKey)
}

// GuardsIntact reports whether no write went outside any MR.
func (m *Memory) GuardsIntact() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, mr := range m.mrs {
		size := len(mr.Buf)
		for i := 0; i < GuardLen; i++ {
			if mr.full[i] != guardByte || mr.full[GuardLen+size+i] != guardByte {
				return false
			}
		}
	}
	return true
}

func (m *Memory) check(mr *MR, pd uint32, addr uint64, length uint32) (*MR, error) {
	if mr == nil || !mr.valid {
		return nil, ErrBadKey
	}
	if mr.PD != pd {
		return nil, ErrBadPD
	}
	if addr < mr.Addr || addr+uint64(length) > mr.Addr+uint64(len(mr.Buf)) || addr+uint64(length) < addr {
		return nil, ErrBadRange
	}
	return mr, nil
}

// Local implements transport.Memory.
func (m *Memory) Local(pd uint32, lkey bth.LKey, addr uint64, length uint32, need transport.Access) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	mr := m.mrs[uint32(lkey)>>8]
	if mr != nil && mr.LKey != lkey {
		mr = nil
	}
	mr, err := m.check(mr, pd, addr, length)
	if err != nil {
		return nil, err
	}
	if need&transport.AccessLocalWrite != 0 && mr.Access&transport.AccessLocalWrite == 0 {
		return nil, ErrBadAccess
	}
	off := addr - mr.Addr
	return mr.Buf[off : off+uint64(length) : off+uint64(length)], nil
}

// Remote implements transport.Memory.
func (m *Memory) Remote(pd uint32, rkey bth.RKey, addr uint64, length uint32, need transport.Access) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	mr := m.rkeys[rkey]
	if mr == nil || !mr.rvalid {
		return nil, ErrBadKey
	}
	mr, err := m.check(mr, pd, addr, length)
	if err != nil {
		return nil, err
	}
	if mr.Access&need != need {
		return nil, ErrBadAccess
	}
	off := addr - mr.Addr
	return mr.Buf[off : off+uint64(length) : off+uint64(length)], nil
}

// Invalidate implements transport.Memory.
func (m *Memory) Invalidate(pd uint32, rkey bth.RKey) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	mr := m.mrs[uint32(rkey)>>8]
	if mr == nil || !mr.rvalid || mr.RKey != rkey {
		return ErrBadKey
	}
	if mr.PD != pd {
		return ErrBadPD
	}
	mr.rvalid = false
	return nil
}

// RValid reports whether mr's R_Key is still valid.
func (m *Memory) RValid(mr *MR) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return mr.rvalid
}

var _ transport.Memory = (*Memory)(nil)

// CQ is a completion queue collecting completions in a slice. With Cap > 0
// it overflows (Push returns false) beyond Cap entries.
type CQ struct {
	mu  sync.Mutex
	WCs []transport.Completion
	Cap int
}

// Push implements transport.CompletionQueue.
func (c *CQ) Push(wc *transport.Completion) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.Cap > 0 && len(c.WCs) >= c.Cap {
		return false
	}
	c.WCs = append(c.WCs, *wc)
	return true
}

// Take returns and clears the collected completions (keeping capacity).
func (c *CQ) Take(dst []transport.Completion) []transport.Completion {
	c.mu.Lock()
	defer c.mu.Unlock()
	dst = append(dst[:0], c.WCs...)
	c.WCs = c.WCs[:0]
	return dst
}

// Len returns the number of collected completions.
func (c *CQ) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.WCs)
}

var _ transport.CompletionQueue = (*CQ)(nil)

// RQ is a bounded receive queue with per-slot SGE storage (allocation-free
// after construction).
type RQ struct {
	mu         sync.Mutex
	ids        []uint64
	sges       []transport.SGE
	nsge       []int
	maxSGE     int
	head, size int
}

// NewRQ returns a receive queue of depth WQEs with up to maxSGE SGEs each.
func NewRQ(depth, maxSGE int) *RQ {
	return &RQ{ids: make([]uint64, depth), sges: make([]transport.SGE, depth*maxSGE), nsge: make([]int, depth), maxSGE: maxSGE}
}

// Post queues a receive WR; it reports false when the queue is full or the
// WR has too many SGEs.
func (r *RQ) Post(id uint64, sgl ...transport.SGE) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.size == len(r.ids) || len(sgl) > r.maxSGE {
		return false
	}
	i := (r.head + r.size) % len(r.ids)
	r.ids[i] = id
	r.nsge[i] = copy(r.sges[i*r.maxSGE:(i+1)*r.maxSGE], sgl)
	r.size++
	return true
}

// Len returns the number of posted WQEs.
func (r *RQ) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.size
}

// Pop implements transport.RecvQueue.
func (r *RQ) Pop(sgl []transport.SGE) (transport.RecvWR, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.size == 0 {
		return transport.RecvWR{}, false
	}
	i := r.head
	k := copy(sgl, r.sges[i*r.maxSGE:i*r.maxSGE+r.nsge[i]])
	r.head = (r.head + 1) % len(r.ids)
	r.size--
	return transport.RecvWR{ID: r.ids[i], SGL: sgl[:k:k]}, true
}

var _ transport.RecvQueue = (*RQ)(nil)

// Faults configures the simulated wire. Probabilities are per packet.
type Faults struct {
	Loss    float64 // dropped
	Corrupt float64 // dropped as a bad ICRC would be (counted apart)
	Dup     float64 // delivered twice
	Reorder float64 // delayed by a random extra 0..Jitter
	Delay   transport.Time
	Jitter  transport.Time
	// Drop, when set, is asked about every packet (after the random
	// faults) and drops it when it returns true. from is 0 or 1.
	Drop func(from int, pkt []byte) bool
}

type flight struct {
	at   transport.Time
	seq  uint64
	to   int
	n    int
	buf  []byte
	info transport.RxInfo
}

type flightHeap []*flight

func (h flightHeap) Len() int { return len(h) }
func (h flightHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}
func (h flightHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *flightHeap) Push(x any)   { *h = append(*h, x.(*flight)) }
func (h *flightHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return x
}

// WireStats counts what the simulated wire did.
type WireStats struct {
	Sent, Delivered, Lost, Corrupted, Duplicated, Reordered uint64
	Bytes                                                   uint64
}

// Wire connects two engines. Packets one side transmits are delivered to
// the other after the configured delay and faults. It is deterministic for
// a given seed.
type Wire struct {
	Now    transport.Time
	QP     [2]*transport.QP
	Faults Faults
	Stats  WireStats
	// Burst caps the packets taken from one side per step (default 32).
	Burst int
	// Tap, when set, sees every transmitted packet before faults.
	Tap func(from int, pkt []byte, ah uint32)

	rng    *rand.Rand
	q      flightHeap
	free   []*flight
	seq    uint64
	bufLen int
}

// NewWire returns a wire between a and b with fault seed seed.
func NewWire(a, b *transport.QP, seed uint64, f Faults) *Wire {
	w := &Wire{QP: [2]*transport.QP{a, b}, Faults: f, Burst: 32, rng: rand.New(rand.NewPCG(seed, seed^0x9E3779B97F4A7C15)),
		bufLen: 4096 + 128}
	if w.Faults.Delay == 0 {
		w.Faults.Delay = 1000 // 1 µs
	}
	return w
}

func (w *Wire) get() *flight {
	if n := len(w.free); n > 0 {
		f := w.free[n-1]
		w.free = w.free[:n-1]
		return f
	}
	return &flight{buf: make([]byte, w.bufLen)}
}

// GRHFor is the RxInfo the wire attaches to packets from side from: an
// IPv4-mapped network header as rxe delivers it (20 zero bytes and an IPv4
// header with 10.0.0.1+from as source).
func GRHFor(from int) transport.RxInfo {
	var info transport.RxInfo
	info.HasGRH = true
	h := info.GRH[20:]
	h[0] = 0x45
	h[8] = 64
	h[9] = 17
	copy(h[12:16], []byte{10, 0, 0, byte(1 + from)})
	copy(h[16:20], []byte{10, 0, 0, byte(2 - from)})
	return info
}

// Step runs one round: timers that are due fire, each side transmits up to
// Burst packets, packets due are delivered. When nothing happened the clock
// jumps to the next event. It reports false when the wire is idle (nothing
// in flight, nothing to send, no timer armed).
func (w *Wire) Step() bool {
	for i, qp := range w.QP {
		_ = i
		if qp.Deadline() <= w.Now {
			qp.Tick(w.Now)
		}
	}
	did := false
	for i, qp := range w.QP {
		for k := 0; k < w.Burst; k++ {
			f := w.get()
			n, ah, ok := qp.Transmit(w.Now, f.buf)
			if !ok {
				w.free = append(w.free, f)
				break
			}
			did = true
			w.Stats.Sent++
			w.Stats.Bytes += uint64(n)
			if w.Tap != nil {
				w.Tap(i, f.buf[:n], ah)
			}
			r := w.rng.Float64()
			switch {
			case r < w.Faults.Loss:
				w.Stats.Lost++
				w.free = append(w.free, f)
				continue
			case r < w.Faults.Loss+w.Faults.Corrupt:
				w.Stats.Corrupted++
				w.free = append(w.free, f)
				continue
			}
			if w.Faults.Drop != nil && w.Faults.Drop(i, f.buf[:n]) {
				w.Stats.Lost++
				w.free = append(w.free, f)
				continue
			}
			f.n, f.to, f.at = n, 1-i, w.Now+w.Faults.Delay
			f.info = GRHFor(i)
			if w.Faults.Reorder > 0 && w.rng.Float64() < w.Faults.Reorder && w.Faults.Jitter > 0 {
				f.at += transport.Time(w.rng.Int64N(int64(w.Faults.Jitter)))
				w.Stats.Reordered++
			}
			w.seq++
			f.seq = w.seq
			heap.Push(&w.q, f)
			if w.Faults.Dup > 0 && w.rng.Float64() < w.Faults.Dup {
				d := w.get()
				copy(d.buf, f.buf[:n])
				d.n, d.to, d.info = n, f.to, f.info
				d.at = f.at + w.Faults.Delay + transport.Time(w.rng.Int64N(int64(w.Faults.Jitter)+1))
				w.seq++
				d.seq = w.seq
				heap.Push(&w.q, d)
				w.Stats.Duplicated++
			}
		}
	}
	for len(w.q) > 0 && w.q[0].at <= w.Now {
		f := heap.Pop(&w.q).(*flight)
		w.QP[f.to].Receive(w.Now, f.buf[:f.n], &f.info)
		w.Stats.Delivered++
		w.free = append(w.free, f)
		did = true
	}
	if did {
		return true
	}
	next := transport.Never
	if len(w.q) > 0 {
		next = w.q[0].at
	}
	for _, qp := range w.QP {
		next = min(next, qp.Deadline())
	}
	if next == transport.Never {
		return false
	}
	if next > w.Now {
		w.Now = next
	}
	return true
}

// InFlight returns the number of packets on the wire.
func (w *Wire) InFlight() int { return len(w.q) }

// Run steps until done reports true, the wire goes idle, or the virtual
// clock passes limit. It reports whether done became true.
func (w *Wire) Run(done func() bool, limit transport.Time) bool {
	for !done() {
		if w.Now > limit || !w.Step() {
			return done()
		}
	}
	return true
}

// Conn holds the parameters for Connect.
type Conn struct {
	Type               transport.QPType
	MTU                bth.MTU
	PSN                [2]bth.PSN // start PSN of each side's send queue
	Timeout            uint8      // local ACK timeout exponent
	RetryCnt, RNRRetry uint8
	MinRNRTimer        bth.RNRTimer
	MaxRdAtomic        int
	Access             transport.Access
	QKey               bth.QKey
	// AccessB, if non-zero, replaces Access for b.
	AccessB transport.Access
	// NoDestRdAtomicB gives b max_dest_rd_atomic 0 (it refuses READ and
	// atomics with NAK invalid request).
	NoDestRdAtomicB bool
}

// Connect moves a and b through INIT, RTR and RTS pointing at each other.
func Connect(now transport.Time, a, b *transport.QP, c Conn) error {
	qps := [2]*transport.QP{a, b}
	for i, qp := range qps {
		peer := qps[1-i]
		access := c.Access
		if i == 1 && c.AccessB != 0 {
			access = c.AccessB
		}
		mdra := c.MaxRdAtomic
		if i == 1 && c.NoDestRdAtomicB {
			mdra = 0
		}
		steps := []struct {
			attr transport.Attr
			mask transport.AttrMask
		}{
			{transport.Attr{State: transport.StateInit, AccessFlags: access, QKey: c.QKey, PKey: bth.DefaultPKey},
				transport.AttrState | transport.AttrAccessFlags | transport.AttrPKeyIndex | transport.AttrQKey},
			{transport.Attr{State: transport.StateRTR, PathMTU: c.MTU, DestQPN: peer.QPN(), RQPSN: c.PSN[1-i],
				MaxDestRdAtomic: mdra, MinRNRTimer: c.MinRNRTimer},
				transport.AttrState | transport.AttrPathMTU | transport.AttrDestQPN | transport.AttrRQPSN |
					transport.AttrMaxDestRdAtomic | transport.AttrMinRNRTimer},
			{transport.Attr{State: transport.StateRTS, SQPSN: c.PSN[i], Timeout: c.Timeout, RetryCnt: c.RetryCnt,
				RNRRetry: c.RNRRetry, MaxRdAtomic: c.MaxRdAtomic},
				transport.AttrState | transport.AttrSQPSN | transport.AttrTimeout | transport.AttrRetryCnt |
					transport.AttrRNRRetry | transport.AttrMaxQPRdAtomic},
		}
		for _, s := range steps {
			if err := qp.Modify(now, &s.attr, s.mask); err != nil {
				return fmt.Errorf("QP %v → %v: %w", qp.QPN(), s.attr.State, err)
			}
		}
	}
	return nil
}

// Side bundles one QP with its memory, queues and a data MR.
type Side struct {
	QP     *transport.QP
	Mem    *Memory
	SendCQ *CQ
	RecvCQ *CQ
	RQ     *RQ
	PD     uint32
}

// NewSide creates a QP of type t with its own CQs and RQ over mem.
func NewSide(t transport.QPType, qpn bth.QPN, pd uint32, mem *Memory, depth int) (*Side, error) {
	s := &Side{Mem: mem, SendCQ: &CQ{}, RecvCQ: &CQ{}, RQ: NewRQ(depth, 4), PD: pd}
	qp, err := transport.NewQP(transport.Config{
		Type: t, QPN: qpn, PD: pd, MaxSendWR: depth, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInlineData: 256,
		Memory: mem, SendCQ: s.SendCQ, RecvCQ: s.RecvCQ, RQ: s.RQ,
	})
	if err != nil {
		return nil, err
	}
	s.QP = qp
	return s, nil
}
