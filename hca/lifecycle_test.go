package hca_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/hca"
	"github.com/goroce/goroce/hca/link"
	"github.com/goroce/goroce/hca/link/memlink"
	"github.com/goroce/goroce/transport"
)

// toReset moves q to RESET.
func toReset(t *testing.T, q *hca.QP) {
	t.Helper()
	var a hca.QPAttr
	a.State = hca.StateReset
	if err := q.Modify(&a, transport.AttrState); err != nil {
		t.Fatal(err)
	}
}

// TestQPFatalAgainAfterReset: a QP whose CQ overran raised QP_FATAL and went
// to ERR; the application takes it through RESET back to RTS (ibv_modify_qp
// allows reuse) and its CQ overruns again. The second loss must raise
// QP_FATAL again: it is all a non-polling application has to learn why the
// reused QP stopped. The once-per-QP flag used to stay set across RESET.
func TestQPFatalAgainAfterReset(t *testing.T) {
	da, db := pair(t, memlink.Config{})
	a := newEnd(t, da, hca.RC, 4096, allAccess)
	b := newEnd(t, db, hca.RC, 4096, allAccess)
	small, err := db.CreateCQ(4)
	if err != nil {
		t.Fatal(err)
	}
	if b.qp, err = b.pd.CreateQP(hca.QPInitAttr{Type: hca.RC, SendCQ: small, RecvCQ: small,
		Cap: hca.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		t.Fatal(err)
	}
	b.cq = small
	for round := 0; round < 2; round++ {
		connect(t, a, b, bth.MTU1024, bth.PSN(100*round+1), bth.PSN(100*round+2))
		const sends = 8
		for i := 0; i < sends; i++ {
			if err := b.qp.PostRecv(&hca.RecvWR{ID: uint64(i), SGL: []hca.SGE{b.mr.SGE(0, 64)}}); err != nil {
				t.Fatal(err)
			}
			if err := a.qp.PostSend(&hca.SendWR{ID: uint64(i), Opcode: transport.WRSend, SGL: []hca.SGE{a.mr.SGE(0, 16)}}); err != nil {
				t.Fatal(err)
			}
		}
		timeout := time.After(20 * time.Second)
	wait:
		for {
			select {
			case ev := <-db.Events():
				if ev.Type == hca.EventQPFatal && ev.QP == b.qp {
					break wait
				}
				if ev.Type != hca.EventCQErr {
					t.Fatalf("round %d: unexpected event %v", round, ev.Type)
				}
			case <-timeout:
				t.Fatalf("round %d: no QP_FATAL in 20 s (QP state %s)", round, b.qp.State())
			}
		}
		if s := b.qp.State(); s != hca.StateErr {
			t.Fatalf("round %d: QP state %s after QP_FATAL, want ERR", round, s)
		}
		// Reuse: both ends back to RESET, the CQ drained (it keeps
		// reporting the overrun, but takes completions again).
		toReset(t, a.qp)
		toReset(t, b.qp)
		wcs := make([]hca.WC, 16)
		if _, err := small.Poll(wcs); !errors.Is(err, hca.ErrCQOverflow) {
			t.Fatalf("round %d: Poll after the overrun: %v, want ErrCQOverflow", round, err)
		}
		if n := small.Len(); n != 0 {
			t.Fatalf("round %d: %d completions left after Poll", round, n)
		}
	}
}

// blockedInWait waits until n goroutines are blocked in CQ.Wait's select.
func blockedInWait(t *testing.T, n int) {
	t.Helper()
	buf := make([]byte, 1<<20)
	for deadline := time.Now().Add(20 * time.Second); ; {
		k := 0
		for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
			if strings.Contains(g, "[select") && strings.Contains(g, "hca.(*CQ).Wait(") {
				k++
			}
		}
		if k >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines blocked in CQ.Wait after 20 s, want %d", k, n)
		}
		runtime.Gosched()
	}
}

// waitAll waits for the results of n waiters on errs, failing the test
// with the goroutines' stacks if they do not all come within 20 s.
func waitAll(t *testing.T, errs <-chan error, n int, want error) {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for i := 0; i < n; i++ {
		select {
		case err := <-errs:
			if !errors.Is(err, want) {
				t.Errorf("waiter %d: %v, want %v", i, err, want)
			}
		case <-timeout:
			buf := make([]byte, 1<<20)
			t.Fatalf("%d of %d waiters still blocked in CQ.Wait after 20 s:\n%s", n-i, n, buf[:runtime.Stack(buf, true)])
		}
	}
}

// TestCloseWakesEveryCQWaiter: several goroutines block in Wait on one CQ
// (any goroutine may use a CQ) with no deadline, and the device is closed.
// Every one of them must return ErrDestroyed, as Wait documents; a single
// wake-up token used to wake one and leave the others blocked for good.
func TestCloseWakesEveryCQWaiter(t *testing.T) {
	da, _ := pair(t, memlink.Config{})
	cq, err := da.CreateCQ(16)
	if err != nil {
		t.Fatal(err)
	}
	const waiters = 3
	errs := make(chan error, waiters)
	for i := 0; i < waiters; i++ {
		go func() { errs <- cq.Wait(context.Background()) }()
	}
	blockedInWait(t, waiters)
	if err := da.Close(); err != nil {
		t.Fatal(err)
	}
	waitAll(t, errs, waiters, hca.ErrDestroyed)
}

// TestCQDestroyRacingCreateQP: CQ.Destroy against a CreateQP that takes
// the CQ and a second Destroy. Either the QP gets the CQ and both Destroys
// fail with ErrInUse, or one Destroy wins and CreateQP fails; never a QP on
// a destroyed CQ (its completions would vanish) or two successful Destroys.
// Destroy used to check the QP count and mark the CQ dead under two
// separate holds of its lock (and read the count after releasing it, which
// -race reports); run with -race to widen the window.
func TestCQDestroyRacingCreateQP(t *testing.T) {
	da, _ := pair(t, memlink.Config{})
	pd, err := da.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	trials := 20000
	if testing.Short() {
		trials = 2000
	}
	for trial := 0; trial < trials; trial++ {
		cq, err := da.CreateCQ(4)
		if err != nil {
			t.Fatal(err)
		}
		var qp *hca.QP
		var qerr error
		var derr [2]error
		var wg sync.WaitGroup
		wg.Go(func() {
			qp, qerr = pd.CreateQP(hca.QPInitAttr{Type: hca.RC, SendCQ: cq, RecvCQ: cq, Cap: hca.QPCap{MaxSendWR: 1, MaxRecvWR: 1}})
		})
		wg.Go(func() { derr[0] = cq.Destroy() })
		wg.Go(func() { derr[1] = cq.Destroy() })
		wg.Wait()
		switch {
		case derr[0] == nil && derr[1] == nil:
			t.Fatalf("trial %d: both Destroys of one CQ succeeded", trial)
		case qerr == nil && (derr[0] == nil || derr[1] == nil):
			t.Fatalf("trial %d: CreateQP got a CQ that Destroy destroyed (Destroy: %v, %v)", trial, derr[0], derr[1])
		case qerr != nil && !errors.Is(qerr, hca.ErrDestroyed):
			t.Fatalf("trial %d: CreateQP: %v, want success or ErrDestroyed", trial, qerr)
		}
		for _, err := range derr {
			if err != nil && !errors.Is(err, hca.ErrInUse) && !errors.Is(err, hca.ErrDestroyed) {
				t.Fatalf("trial %d: Destroy: %v", trial, err)
			}
		}
		if qp != nil {
			if err := qp.Destroy(); err != nil {
				t.Fatal(err)
			}
			if err := cq.Destroy(); err != nil {
				t.Fatalf("trial %d: Destroy once the QP is gone: %v", trial, err)
			}
		}
	}
}

// TestCloseDestroysSRQsAndPDs: after Device.Close, the calls of its SRQs
// and PDs fail with ErrDestroyed, as those of its QPs and CQs do. An SRQ
// used to take receives that nothing would ever complete, and a PD,
// still counting the QPs Close had destroyed, refused deallocation as
// "in use".
func TestCloseDestroysSRQsAndPDs(t *testing.T) {
	da, _ := pair(t, memlink.Config{})
	pd, err := da.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := da.CreateCQ(16)
	if err != nil {
		t.Fatal(err)
	}
	srq, err := pd.CreateSRQ(hca.SRQAttr{MaxWR: 4, MaxSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pd.CreateQP(hca.QPInitAttr{Type: hca.RC, SendCQ: cq, RecvCQ: cq, SRQ: srq, Cap: hca.QPCap{MaxSendWR: 4}}); err != nil {
		t.Fatal(err)
	}
	if err := da.Close(); err != nil {
		t.Fatal(err)
	}
	if err := srq.PostRecv(&hca.RecvWR{ID: 1}); !errors.Is(err, hca.ErrDestroyed) {
		t.Errorf("SRQ PostRecv after Close: %v, want ErrDestroyed", err)
	}
	if err := srq.Modify(1); !errors.Is(err, hca.ErrDestroyed) {
		t.Errorf("SRQ Modify after Close: %v, want ErrDestroyed", err)
	}
	if err := srq.Destroy(); !errors.Is(err, hca.ErrDestroyed) {
		t.Errorf("SRQ Destroy after Close: %v, want ErrDestroyed", err)
	}
	if err := pd.Dealloc(); !errors.Is(err, hca.ErrDestroyed) {
		t.Errorf("PD Dealloc after Close: %v, want ErrDestroyed", err)
	}
	if _, err := pd.CreateSRQ(hca.SRQAttr{MaxWR: 4, MaxSGE: 1}); err == nil {
		t.Errorf("CreateSRQ after Close succeeded")
	}
}

// TestCQWaitersAllWake: two goroutines enter Wait as two completions
// arrive. Wait promises to return once the CQ holds a completion, so
// neither may sleep on: the 1-slot wake-up channel used to drop the second
// Push's token when both pushes landed before either waiter blocked, and
// the waiter that took the one token did not pass it on, leaving the other
// asleep on a CQ that held two completions. A race, so many rounds.
func TestCQWaitersAllWake(t *testing.T) {
	da, _ := pair(t, memlink.Config{})
	rounds := 3000
	if testing.Short() {
		rounds = 300
	}
	for r := 0; r < rounds; r++ {
		cq, err := da.CreateCQ(4)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		errs := make(chan error, 2)
		var start sync.WaitGroup
		start.Add(2)
		for i := 0; i < 2; i++ {
			go func() {
				start.Done()
				errs <- cq.Wait(ctx)
			}()
		}
		start.Wait()
		for i := 0; i < 2; i++ {
			if !cq.Push(&hca.WC{WRID: uint64(i)}) {
				t.Fatal("push refused")
			}
		}
		for i := 0; i < 2; i++ {
			if err := <-errs; err != nil {
				t.Fatalf("round %d: a waiter returned %v with %d completions queued", r, err, cq.Len())
			}
		}
		cancel()
		if err := cq.Destroy(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCloseEndsEvents: a goroutine ranging over Device.Events ends when
// the device closes, after the events still buffered; the channel used to
// stay open, and such a goroutine waited for good.
func TestCloseEndsEvents(t *testing.T) {
	da, _ := pair(t, memlink.Config{})
	done := make(chan int)
	go func() {
		n := 0
		for range da.Events() {
			n++
		}
		done <- n
	}()
	if err := da.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case n := <-done:
		if n != 0 {
			t.Fatalf("%d events from a device that raised none", n)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ranging over Events did not end at Close")
	}
}

// slowClose is a link whose Close waits for release.
type slowClose struct {
	link.Endpoint
	entered, release chan struct{}
	closed           atomic.Bool
}

func (s *slowClose) Close() error {
	close(s.entered)
	<-s.release
	err := s.Endpoint.Close()
	s.closed.Store(true)
	return err
}

// TestSecondCloseWaitsForFirst: a Close called while another is still
// closing the device returns once the device is closed, not at once: it
// used to return nil while the first was still stopping the runtime, so a
// caller could go on to reuse the link's addresses, or exit, too early.
func TestSecondCloseWaitsForFirst(t *testing.T) {
	a, b, err := memlink.Pair(memlink.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ep := &slowClose{Endpoint: a, entered: make(chan struct{}), release: make(chan struct{})}
	d, err := hca.Open(ep, hca.Options{})
	if err != nil {
		t.Fatal(err)
	}
	first := make(chan error, 1)
	go func() { first <- d.Close() }()
	<-ep.entered
	time.AfterFunc(50*time.Millisecond, func() { close(ep.release) })
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if !ep.closed.Load() {
		t.Fatal("the second Close returned while the first was still closing the link")
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
}

// TestOpenRefusesBadNames: a device name is what ibv_devinfo prints as
// hca_id and what -d takes: one printable word of at most 63 bytes (the
// kernel's IB_DEVICE_NAME_MAX less its NUL). A newline in it broke the
// devinfo layout; a name of any length was taken.
func TestOpenRefusesBadNames(t *testing.T) {
	for _, name := range []string{"a\nb", "goroce 0", "tab\there", "nul\x00", "é", strings.Repeat("x", 64)} {
		a, b, err := memlink.Pair(memlink.Config{})
		if err != nil {
			t.Fatal(err)
		}
		if d, err := hca.Open(a, hca.Options{Name: name}); !errors.Is(err, hca.ErrInvalidArg) {
			if d != nil {
				d.Close()
			}
			t.Errorf("Open(name %q) = %v; want ErrInvalidArg", name, err)
		}
		a.Close()
		b.Close()
	}
	a, b, err := memlink.Pair(memlink.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	d, err := hca.Open(a, hca.Options{Name: "rxe_" + strings.Repeat("x", 59)})
	if err != nil {
		t.Fatalf("a 63-byte name: %v", err)
	}
	d.Close()
}
