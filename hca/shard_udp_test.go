package hca_test

import (
	"sync"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/hca"
)

// On the UDP link over IPv4 a device with several shards also gets one
// receive queue per shard (udp.Endpoint.SplitRx): QPs of every shard, on
// both devices, deliver every message intact and in order while all shards
// send and receive at once. Opened inside a fresh namespace, used from
// outside it, as the tools and tests do.
func TestShardedUDPReceiveQueues(t *testing.T) {
	const shards = 3
	da, db := udpDevices(t, hca.Options{Shards: shards})
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
}
