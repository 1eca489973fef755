package hca

import (
	goruntime "runtime"
	"testing"

	"github.com/goroce/goroce/hca/link"
	"github.com/goroce/goroce/hca/link/memlink"
)

// soloWriter hides memlink's TxQueuer: a link that can only be written
// from one goroutine.
type soloWriter struct{ link.Endpoint }

func TestShardCount(t *testing.T) {
	a, b, err := memlink.Pair(memlink.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	defer b.Close()
	auto := min(goruntime.GOMAXPROCS(0), maxAutoShards)
	for _, tc := range []struct {
		name string
		ep   link.Endpoint
		opt  int
		want int
	}{
		{"queues, auto", a, 0, auto},
		{"queues, 1", a, 1, 1},
		{"queues, 6", a, 6, 6},
		{"no queues, auto", soloWriter{a}, 0, 1},
		{"no queues, 6", soloWriter{a}, 6, 1},
		{"negative", a, -2, auto},
	} {
		if got := shardCount(tc.ep, tc.opt); got != tc.want {
			t.Errorf("%s: shardCount = %d, want %d", tc.name, got, tc.want)
		}
	}
}

// QPs are spread over the shards by QPN, and the link writer of shard 0 is
// the endpoint itself while the others are transmit queues.
func TestQPsSpreadOverShards(t *testing.T) {
	a, d, pd, cq := threeShards(t)
	if len(d.rt.shards) != 3 {
		t.Fatalf("%d shards, want 3", len(d.rt.shards))
	}
	if d.rt.shards[0].w != link.Writer(a) {
		t.Error("shard 0 does not write through the endpoint")
	}
	per := map[*shard]int{}
	for range 9 {
		q, err := pd.CreateQP(QPInitAttr{Type: RC, SendCQ: cq, RecvCQ: cq, Cap: QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		if q.shard != d.rt.shardOf(uint32(q.qpn)) {
			t.Fatalf("QP %d on the wrong shard", q.qpn)
		}
		per[q.shard]++
	}
	for i, s := range d.rt.shards {
		if per[s] != 3 {
			t.Errorf("shard %d has %d of 9 QPs, want 3", i, per[s])
		}
	}
}

// The QPs of one SRQ share a shard, whatever else is created between
// them, and the QPNs stay unique (TestQPsSpreadOverShards covers QPs
// without an SRQ).
func TestSRQQPsShareAShard(t *testing.T) {
	_, d, pd, cq := threeShards(t)
	var srqs [2]*SRQ
	for i := range srqs {
		var err error
		if srqs[i], err = pd.CreateSRQ(SRQAttr{MaxWR: 8, MaxSGE: 1}); err != nil {
			t.Fatal(err)
		}
	}
	create := func(srq *SRQ) *QP {
		t.Helper()
		q, err := pd.CreateQP(QPInitAttr{Type: RC, SendCQ: cq, RecvCQ: cq, SRQ: srq, Cap: QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		if q.shard != d.rt.shardOf(uint32(q.qpn)) {
			t.Fatalf("QP %d on the wrong shard", q.qpn)
		}
		return q
	}
	first := [2]*shard{}
	seen := map[uint32]bool{}
	for i := range 12 {
		k := i % 2
		q := create(srqs[k])
		if seen[uint32(q.qpn)] {
			t.Fatalf("QPN %d given twice", q.qpn)
		}
		seen[uint32(q.qpn)] = true
		if first[k] == nil {
			first[k] = q.shard
		} else if q.shard != first[k] {
			t.Errorf("QP %d of SRQ %d on another shard than the SRQ's first QP", q.qpn, k)
		}
		p := create(nil) // in between, a QP of its own receive queue
		if seen[uint32(p.qpn)] {
			t.Fatalf("QPN %d given twice", p.qpn)
		}
		seen[uint32(p.qpn)] = true
	}
}

// threeShards opens a device of three shards on one end of a memlink pair,
// with a PD and a CQ, all closed when t ends; it returns that end too.
func threeShards(t *testing.T) (link.Endpoint, *Device, *PD, *CQ) {
	t.Helper()
	a, b, err := memlink.Pair(memlink.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	d, err := Open(a, Options{Shards: 3})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	pd, err := d.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := d.CreateCQ(16)
	if err != nil {
		t.Fatal(err)
	}
	return a, d, pd, cq
}

// TestLateDeferralAfterStop: a busy-poll PostSend that races Close may
// mark its runtime deferred after stop's last flush. The mark must not
// outlive the runtime: deferring.n used to stay above zero for good, and
// every later Poll in the process walked the busy pollers.
func TestLateDeferralAfterStop(t *testing.T) {
	a, b, err := memlink.Pair(memlink.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	d, err := Open(a, Options{BusyPoll: true})
	if err != nil {
		t.Fatal(err)
	}
	before := deferring.n.Load()
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	d.rt.markDeferred(d.now()) // what the late PostSend does
	if n := deferring.n.Load(); n != before {
		t.Fatalf("deferring.n %d after a deferral on a stopped runtime, %d before", n, before)
	}
}
