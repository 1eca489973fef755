package hca

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/transport"
)

// Access is a set of memory access rights (ibv_access_flags).
type Access = transport.Access

// Access rights re-exported from transport.
const (
	AccessLocalWrite   = transport.AccessLocalWrite
	AccessRemoteWrite  = transport.AccessRemoteWrite
	AccessRemoteRead   = transport.AccessRemoteRead
	AccessRemoteAtomic = transport.AccessRemoteAtomic
)

const accessAll = AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic

// PD is a protection domain. Its calls that create an object (CreateQP,
// CreateSRQ, CreateAH, RegMR) return ErrClosed once the device is closed
// and ErrDestroyed once the PD is deallocated, after the checks of their
// arguments; Dealloc returns ErrDestroyed after either (Device.Close
// deallocates every PD).
type PD struct {
	dev  *Device
	id   uint32
	mu   sync.Mutex // protects refs and dead
	refs int
	dead bool
}

// AllocPD allocates a protection domain (ibv_alloc_pd).
func (d *Device) AllocPD() (*PD, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkOpen(); err != nil {
		return nil, err
	}
	if len(d.pds) >= d.attr.MaxPD {
		return nil, fmt.Errorf("%w: max_pd %d", ErrLimit, d.attr.MaxPD)
	}
	pd := &PD{dev: d, id: d.nextPD}
	d.nextPD++
	d.pds[pd.id] = pd
	return pd, nil
}

// Handle returns the PD's number.
func (pd *PD) Handle() uint32 { return pd.id }

// Dealloc frees the PD; it fails while MRs, QPs, SRQs or AHs use it.
func (pd *PD) Dealloc() error {
	pd.mu.Lock()
	defer pd.mu.Unlock()
	if pd.dead {
		return ErrDestroyed
	}
	if pd.refs > 0 {
		return fmt.Errorf("%w: PD %d still has %d objects", ErrInUse, pd.id, pd.refs)
	}
	pd.dead = true
	pd.dev.mu.Lock()
	delete(pd.dev.pds, pd.id)
	pd.dev.mu.Unlock()
	return nil
}

func (pd *PD) ref() error {
	// The device first: Close also kills the PD, and what failed is that
	// the device is closed (as AllocPD and CreateCQ report).
	if err := pd.dev.open(); err != nil {
		return err
	}
	pd.mu.Lock()
	defer pd.mu.Unlock()
	if pd.dead {
		return fmt.Errorf("%w: PD %d", ErrDestroyed, pd.id)
	}
	pd.refs++
	return nil
}

func (pd *PD) unref() {
	pd.mu.Lock()
	pd.refs--
	pd.mu.Unlock()
}

// MR is a registered memory region. Its address space is the real virtual
// address of the registered buffer, as with verbs, so a peer's RETH VA is
// the address the owner sees.
//
// LKey, RKey, Addr, Len, Bytes and SGE read what the MR was registered
// with and keep answering after Dereg or Device.Close: the keys then name
// nothing (a WR or a peer using them gets an access error, and the 8-bit
// generation in each key keeps a new MR from answering to them).
type MR struct {
	pd     *PD
	buf    []byte
	addr   uint64
	access Access
	lkey   bth.LKey
	rkey   bth.RKey
	index  uint32
}

// RegMR registers buf with the given access (ibv_reg_mr). As verbs
// requires, REMOTE_WRITE and REMOTE_ATOMIC need LOCAL_WRITE. buf must stay
// alive and must not be resized while registered; the caller may read and
// write it at any time, but must not expect ordering with remote accesses
// other than through completions.
func (pd *PD) RegMR(buf []byte, access Access) (*MR, error) {
	if len(buf) == 0 {
		return nil, fmt.Errorf("%w: cannot register an empty buffer", ErrInvalidArg)
	}
	if access&^accessAll != 0 {
		return nil, fmt.Errorf("%w: unknown access flags 0x%x", ErrInvalidArg, uint32(access&^accessAll))
	}
	if access&(AccessRemoteWrite|AccessRemoteAtomic) != 0 && access&AccessLocalWrite == 0 {
		return nil, fmt.Errorf("%w: REMOTE_WRITE and REMOTE_ATOMIC require LOCAL_WRITE", ErrInvalidArg)
	}
	if err := pd.dev.open(); err != nil {
		return nil, err
	}
	if err := pd.ref(); err != nil {
		return nil, err
	}
	if h := registerHook; h != nil {
		h()
	}
	mr := &MR{pd: pd, buf: buf, addr: uint64(uintptr(unsafe.Pointer(&buf[0]))), access: access}
	if err := pd.dev.mrs.add(mr, pd.dev.attr.MaxMR); err != nil {
		pd.unref()
		return nil, err
	}
	return mr, nil
}

// registerHook, when set (tests only: export_test.go), runs in RegMR and
// CreateAH between their checks and the table add: the window where a
// Device.Close can slip in (the table's add then refuses: slotTable.clear).
var registerHook func()

// LKey returns the local key.
func (mr *MR) LKey() bth.LKey { return mr.lkey }

// RKey returns the remote key.
func (mr *MR) RKey() bth.RKey { return mr.rkey }

// Addr returns the virtual address of the first byte.
func (mr *MR) Addr() uint64 { return mr.addr }

// Len returns the registered length.
func (mr *MR) Len() int { return len(mr.buf) }

// Bytes returns the registered buffer.
func (mr *MR) Bytes() []byte { return mr.buf }

// SGE returns a scatter/gather element covering [off, off+n) of the MR.
func (mr *MR) SGE(off, n int) transport.SGE {
	return transport.SGE{Addr: mr.addr + uint64(off), Length: uint32(n), LKey: mr.lkey}
}

// Dereg deregisters the MR (ibv_dereg_mr). Later accesses with its keys
// fail, and once Dereg returns no engine touches the buffer any more: a
// WRITE or READ a peer had started on it is refused from its next packet
// (NAK, remote access error), so the buffer is the caller's alone. After
// Device.Close, which deregisters every MR of the device, it returns
// ErrDestroyed, as a second Dereg does.
func (mr *MR) Dereg() error {
	d := mr.pd.dev
	if !d.mrs.remove(mr) {
		return fmt.Errorf("%w: MR already deregistered (by Dereg or Device.Close)", ErrDestroyed)
	}
	// The engines resolve a key for every packet, each under its QP's
	// lock, and only QPs of the MR's PD can resolve its keys: once each of
	// those locks has been free after the remove, a step that resolved a
	// key before it has finished, and every later one finds no MR (as
	// rxe's dereg waits for the references its packets hold).
	d.qps.each(func(q *QP) {
		if q.pd == mr.pd {
			q.mu.Lock()
			q.mu.Unlock() // an empty critical section: the wait is the point
		}
	})
	mr.pd.unref()
	return nil
}

// registered reports whether mr is in its device's table: neither
// deregistered nor of a closed device.
func (mr *MR) registered() bool { return mr.pd.dev.mrs.get(mr.index) == mr }

// mrTable maps key indices to MRs. Keys are index<<8 | 8-bit key, as rxe's.
// It implements transport.Memory. Lookups take no lock (slotTable): the
// engines resolve a key for every packet, from every shard.
type mrTable struct {
	slotTable[MR]
}

func (t *mrTable) add(mr *MR, max int) error {
	return t.slotTable.add(mr, max, "max_mr", func(idx uint32, gen uint8) {
		mr.index = idx
		mr.lkey = bth.LKey(idx<<8 | uint32(gen))
		mr.rkey = bth.RKey(idx<<8 | uint32(gen))
	})
}

func (t *mrTable) remove(mr *MR) bool { return t.slotTable.remove(mr, mr.index) }

// lookup returns the MR whose index key names, or nil; the caller checks
// the key's 8 low bits.
func (t *mrTable) lookup(key uint32) *MR { return t.get(key >> 8) }

// errMemKey etc. are the typed reasons of a refused memory access.
var (
	errMemKey    = fmt.Errorf("%w: no memory region with this key", ErrAccess)
	errMemPD     = fmt.Errorf("%w: memory region belongs to another PD", ErrAccess)
	errMemRange  = fmt.Errorf("%w: range outside the memory region", ErrAccess)
	errMemRights = fmt.Errorf("%w: memory region does not allow this access", ErrAccess)
	errMemNoInv  = fmt.Errorf("%w: a region registered with RegMR cannot be invalidated by a peer", ErrAccess)
)

func (t *mrTable) resolve(pd uint32, key uint32, addr uint64, length uint32, need Access, local bool) ([]byte, error) {
	mr := t.lookup(key)
	if mr == nil {
		return nil, errMemKey
	}
	if local && uint32(mr.lkey) != key || !local && uint32(mr.rkey) != key {
		return nil, errMemKey
	}
	if mr.pd.id != pd {
		return nil, errMemPD
	}
	if need&^mr.access != 0 {
		return nil, errMemRights
	}
	if addr < mr.addr {
		return nil, errMemRange
	}
	off := addr - mr.addr
	size := uint64(len(mr.buf))
	if off > size || uint64(length) > size-off {
		return nil, errMemRange
	}
	return mr.buf[off : off+uint64(length) : off+uint64(length)], nil
}

// Local implements transport.Memory.
func (t *mrTable) Local(pd uint32, lkey bth.LKey, addr uint64, length uint32, need Access) ([]byte, error) {
	return t.resolve(pd, uint32(lkey), addr, length, need, true)
}

// Remote implements transport.Memory.
func (t *mrTable) Remote(pd uint32, rkey bth.RKey, addr uint64, length uint32, need Access) ([]byte, error) {
	if need == 0 {
		return nil, errMemRights // a remote access always needs a right
	}
	return t.resolve(pd, uint32(rkey), addr, length, need, false)
}

// Invalidate implements transport.Memory for a received SEND_WITH_INV. A
// peer may invalidate only a memory window or a region allocated for fast
// registration (IBA; rxe's responder refuses every MR not of type
// IB_MR_TYPE_MEM_REG), and a Device has neither: every region comes from
// RegMR, and no verb could make one valid again. So the request is always
// refused (the responder NAKs it as an invalid request), with the reason:
// no such key, another PD, or a registered region. Accepting it would let
// any peer that learned an R_Key revoke the region for good.
func (t *mrTable) Invalidate(pd uint32, rkey bth.RKey) error {
	mr := t.lookup(uint32(rkey))
	if mr == nil || uint32(mr.rkey) != uint32(rkey) {
		return errMemKey
	}
	if mr.pd.id != pd {
		return errMemPD
	}
	return errMemNoInv
}

var _ transport.Memory = (*mrTable)(nil)
