package hca_test

import (
	"bytes"
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/hca"
	"github.com/goroce/goroce/hca/link/memlink"
	"github.com/goroce/goroce/hca/link/udp"
	"github.com/goroce/goroce/hca/netcfg"
	"github.com/goroce/goroce/transport"
)

// udpDevices opens two devices on the udp link in a fresh namespace.
func udpDevices(t *testing.T, opts hca.Options) (*hca.Device, *hca.Device) {
	t.Helper()
	netcfg.SkipUnlessRoot(t)
	ns, err := netcfg.NewNetNS("")
	if err != nil {
		t.Fatalf("network namespace: %v", err)
	}
	t.Cleanup(func() { ns.Close() })
	var ea, eb *udp.Endpoint
	if err := ns.Do(func() error {
		var err error
		if ea, err = udp.Open(udp.Config{Addr: netip.MustParseAddr("127.0.0.1")}); err != nil {
			return err
		}
		eb, err = udp.Open(udp.Config{Addr: netip.MustParseAddr("127.0.0.2")})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	oa, ob := opts, opts
	oa.Name, ob.Name = "bpa", "bpb"
	da, err := hca.Open(ea, oa)
	if err != nil {
		t.Fatal(err)
	}
	db, err := hca.Open(eb, ob)
	if err != nil {
		da.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { da.Close(); db.Close() })
	return da, db
}

// spinWC spins on Poll as a busy-polling application does.
func spinWC(t *testing.T, cq *hca.CQ) hca.WC {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	var wc [1]hca.WC
	for {
		n, err := cq.Poll(wc[:])
		if err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			return wc[0]
		}
		if time.Now().After(deadline) {
			t.Fatal("no completion")
		}
	}
}

// With Options.BusyPoll, a goroutine spinning on CQ.Poll drives the link
// itself: a SEND ping-pong completes in order with the data intact while the
// reader goroutines stand aside, and when the spinning stops they take over
// again (blocking waits still complete).
func TestBusyPoll(t *testing.T) {
	for _, shards := range []int{1, 2} {
		da, db := udpDevices(t, hca.Options{BusyPoll: true, Shards: shards})
		if !da.BusyPolling() || !db.BusyPolling() {
			t.Fatal("udp devices with BusyPoll do not busy-poll")
		}
		a := newEnd(t, da, hca.RC, 64<<10, allAccess)
		b := newEnd(t, db, hca.RC, 64<<10, allAccess)
		connect(t, a, b, bth.MTU4096, 1, 2)
		half := len(a.buf) / 2
		for i := range 300 {
			n := 1 + (i*997)%(half-1)
			fill(a.buf[:n], byte(i))
			if err := b.qp.PostRecv(&hca.RecvWR{ID: uint64(i), SGL: []hca.SGE{b.mr.SGE(half, half)}}); err != nil {
				t.Fatal(err)
			}
			if err := a.qp.PostSend(&hca.SendWR{ID: uint64(i), Opcode: transport.WRSend, Flags: transport.SendSignaled,
				SGL: []hca.SGE{a.mr.SGE(0, n)}}); err != nil {
				t.Fatal(err)
			}
			if wc := spinWC(t, b.cq); wc.Status != transport.StatusSuccess || wc.WRID != uint64(i) || wc.ByteLen != uint32(n) ||
				!bytes.Equal(b.buf[half:half+n], a.buf[:n]) {
				t.Fatalf("shards %d message %d: %+v or data differs", shards, i, wc)
			}
			if wc := spinWC(t, a.cq); wc.Status != transport.StatusSuccess || wc.WRID != uint64(i) {
				t.Fatalf("shards %d send %d: %+v", shards, i, wc)
			}
		}
		// No more spinning: the reader goroutines receive again.
		time.Sleep(5 * time.Millisecond)
		if err := b.qp.PostRecv(&hca.RecvWR{ID: 1000, SGL: []hca.SGE{b.mr.SGE(half, half)}}); err != nil {
			t.Fatal(err)
		}
		if err := a.qp.PostSend(&hca.SendWR{ID: 1000, Opcode: transport.WRSend, Flags: transport.SendSignaled,
			SGL: []hca.SGE{a.mr.SGE(0, 100)}}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		err := b.cq.Wait(ctx)
		cancel()
		if err != nil {
			t.Fatalf("shards %d: blocking wait after busy polling: %v", shards, err)
		}
	}
}

// A link that cannot be read without blocking (memlink) does not busy-poll
// even when asked: BusyPolling says so, and the bench falls back to waiting.
func TestBusyPollingNeedsAPoller(t *testing.T) {
	a, b, err := memlink.Pair(memlink.Config{AddrsA: []netip.Addr{addrA}, AddrsB: []netip.Addr{addrB}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	d, err := hca.Open(a, hca.Options{BusyPoll: true})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.BusyPolling() {
		t.Error("memlink device claims to busy-poll")
	}
}
