package hca

import "fmt"

// ReadMR copies mr's bytes [off, off+len(p)) into p while holding q's lock,
// the lock under which the HCA places the data of q's incoming RDMA WRITEs,
// SENDs and READ responses. A program that polls memory a peer writes with
// RDMA WRITE (as ib_write_lat spins on its buffer) must read it this way:
// a plain read would race with the HCA's copy under the Go memory model.
// Data placed through other QPs is not ordered by this call.
//
// It returns ErrDestroyed when q is destroyed (Destroy, Device.Close) or mr
// deregistered (Dereg, Device.Close): neither places data any more, so
// there is nothing to order with, and a read of a deregistered MR is a
// use after free in verbs. A range outside the MR, or a nil MR, is
// ErrInvalidArg.
func (q *QP) ReadMR(mr *MR, off int, p []byte) error {
	if q.destroyed.Load() {
		return ErrDestroyed
	}
	if mr == nil {
		return fmt.Errorf("%w: ReadMR of a nil MR", ErrInvalidArg)
	}
	if !mr.registered() {
		return fmt.Errorf("%w: ReadMR of a deregistered MR", ErrDestroyed)
	}
	if off < 0 || off > len(mr.buf) || len(p) > len(mr.buf)-off {
		return fmt.Errorf("%w: ReadMR [%d, %d+%d) outside the MR of %d bytes", ErrInvalidArg, off, off, len(p), len(mr.buf))
	}
	q.mu.Lock()
	copy(p, mr.buf[off:])
	q.mu.Unlock()
	return nil
}
