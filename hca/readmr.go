package hca

import "fmt"

// ReadMR copies mr's bytes [off, off+len(p)) into p while holding q's lock,
// the lock under which the HCA places the data of q's incoming RDMA WRITEs,
// SENDs and READ responses. A program that polls memory a peer writes with
// RDMA WRITE (as ib_write_lat spins on its buffer) must read it this way:
// a plain read would race with the HCA's copy under the Go memory model.
// Data placed through other QPs is not ordered by this call.
func (q *QP) ReadMR(mr *MR, off int, p []byte) error {
	if mr == nil || off < 0 || off > len(mr.buf) || len(p) > len(mr.buf)-off {
		return fmt.Errorf("hca: ReadMR [%d, %d+%d) outside the MR", off, off, len(p))
	}
	q.mu.Lock()
	copy(p, mr.buf[off:])
	q.mu.Unlock()
	return nil
}
