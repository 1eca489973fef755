package hca_test

import (
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/hca"
	"github.com/goroce/goroce/hca/link/udp"
	"github.com/goroce/goroce/transport"
)

// deepPipeEnd connects an RC QP on da to one on db and destroys the latter,
// so that what da sends is dropped at db (no such QP) and never
// acknowledged: every packet posted stays in flight.
func deepPipeEnd(t *testing.T, da, db *hca.Device) *end {
	t.Helper()
	rcTimeout = 20 // 4.3 s: no retransmission while the test looks
	defer func() { rcTimeout = 14 }()
	a := newEnd(t, da, hca.RC, 4096, allAccess)
	b := newEnd(t, db, hca.RC, 4096, allAccess)
	connect(t, a, b, bth.MTU1024, 100, 200)
	if err := b.qp.Destroy(); err != nil {
		t.Fatal(err)
	}
	return a
}

func postInlineSends(t *testing.T, e *end, n int) {
	t.Helper()
	for i := range n {
		wr := hca.SendWR{ID: uint64(i), Opcode: transport.WRSend, Flags: transport.SendInline | transport.SendSignaled,
			Inline: e.buf[:16]}
		if err := e.qp.PostSend(&wr); err != nil {
			t.Fatal(err)
		}
	}
}

// waitTxFrames waits up to 5 s for ep to have sent n frames in all.
func waitTxFrames(t *testing.T, ep *udp.Endpoint, n uint64) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ep.Stats().TxFrames < n && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
}

// deepPipe is hca's threshold (runtime.go): from this many unacknowledged
// packets a post leaves with the next pump instead of from PostSend.
const deepPipe = 32

// Posts behind deepPipe unacknowledged packets wait for the next pump (a
// post behind a shallow pipe leaves from PostSend itself:
// TestBusyPollSendLatOneCallPerMessage); with busy polling that is the
// poller's next round, where all of them leave in one sendmmsg.
func TestDeepPipePostsLeaveTogether(t *testing.T) {
	da, db := udpDevicesWith(t, hca.Options{BusyPoll: true, Shards: 1}, hca.Options{Shards: 1})
	a := deepPipeEnd(t, da, db)
	ep := da.Link().(*udp.Endpoint)
	s0 := ep.Stats()
	postInlineSends(t, a, deepPipe)
	waitTxFrames(t, ep, s0.TxFrames+deepPipe)
	// Let the shard's worker, which the first transmission woke to arm
	// the retransmission timer (and which may have sent a post whose
	// PostSend found the shard busy), go back to sleep: it would
	// otherwise send whatever is on the doorbell list when it runs.
	time.Sleep(20 * time.Millisecond)
	s1 := ep.Stats()
	const more = 8
	start := time.Now()
	postInlineSends(t, a, more)
	s2 := ep.Stats()
	// A deferral lasts at most 2 ms (deferLimit) when nobody polls; a
	// slower machine than that cannot show the posts waiting.
	quick := time.Since(start) < time.Millisecond
	if quick && s2.TxFrames != s1.TxFrames {
		t.Errorf("posts behind %d unacknowledged packets: %d frames sent from PostSend; want them left for the poll round",
			deepPipe, s2.TxFrames-s1.TxFrames)
	}
	var wc [4]hca.WC
	if _, err := a.cq.Poll(wc[:]); err != nil {
		t.Fatal(err)
	}
	waitTxFrames(t, ep, s1.TxFrames+more)
	s3 := ep.Stats()
	if f := s3.TxFrames - s1.TxFrames; f != more {
		t.Fatalf("%d posts behind a deep pipe: %d frames sent; want %d", more, f, more)
	}
	if c := s3.TxCalls - s1.TxCalls; quick && c != 1 {
		t.Errorf("%d posts behind a deep pipe left in %d sendmmsg calls; want 1", more, c)
	}
	t.Logf("%d posts behind the deep pipe: %d frames in %d calls (waited: %v)", more, s3.TxFrames-s1.TxFrames, s3.TxCalls-s1.TxCalls, quick)
}

// Without busy polling the shard's worker sends what posts behind a deep
// pipe leave: nothing is stranded.
func TestDeepPipePostsReachTheWorker(t *testing.T) {
	da, db := udpDevicesWith(t, hca.Options{Shards: 1}, hca.Options{Shards: 1})
	a := deepPipeEnd(t, da, db)
	ep := da.Link().(*udp.Endpoint)
	s0 := ep.Stats()
	const n = 3 * deepPipe
	postInlineSends(t, a, n)
	waitTxFrames(t, ep, s0.TxFrames+n)
	s1 := ep.Stats()
	if f := s1.TxFrames - s0.TxFrames; f != n {
		t.Fatalf("%d posts, %d of them behind a deep pipe: %d frames sent; want %d", n, n-deepPipe, f, n)
	}
	t.Logf("%d posts: %d frames in %d sendmmsg calls", n, s1.TxFrames-s0.TxFrames, s1.TxCalls-s0.TxCalls)
}
