package hca_test

import (
	"net/netip"
	"sync"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/hca"
	"github.com/goroce/goroce/hca/link/udp"
	"github.com/goroce/goroce/hca/netcfg"
)

// On the UDP link over IPv4 a device with several shards also gets one
// receive queue per shard (udp.Endpoint.SplitRx): QPs of every shard, on
// both devices, deliver every message intact and in order while all shards
// send and receive at once. Opened inside a fresh namespace, used from
// outside it, as the tools and tests do.
func TestShardedUDPReceiveQueues(t *testing.T) {
	netcfg.SkipUnlessRoot(t)
	ns, err := netcfg.NewNetNS("")
	if err != nil {
		t.Fatalf("network namespace: %v", err)
	}
	defer ns.Close()
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
	const shards = 3
	da, err := hca.Open(ea, hca.Options{Name: "sa", Shards: shards})
	if err != nil {
		t.Fatal(err)
	}
	defer da.Close()
	db, err := hca.Open(eb, hca.Options{Name: "sb", Shards: shards})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	const pairs, msgs = 6, 60
	var wg sync.WaitGroup
	errs := make(chan error, pairs)
	for i := range pairs {
		a := newEnd(t, da, hca.RC, 64<<10, allAccess)
		b := newEnd(t, db, hca.RC, 64<<10, allAccess)
		connect(t, a, b, bth.MTU4096, bth.PSN(i*1000), bth.PSN(0xFFFF00+i))
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- drive(t, i, a, b, msgs)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	for _, d := range []*hca.Device{da, db} {
		c := &d.Counters
		if n := c.RxUnknownQP.Load() + c.RxICRCErrors.Load() + c.RxMalformed.Load(); n != 0 {
			t.Errorf("%s dropped %d frames", d.Name(), n)
		}
	}
	if s := eb.Stats(); s.RxFrames == 0 {
		t.Errorf("nothing received: %+v", s)
	}
}
