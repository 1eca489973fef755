package udp

import (
	"testing"

	"github.com/goroce/goroce/hca/link/linktest"
)

// link.Poller (linktest.Poller), with the sockets in the netpoller and, as
// an HCA that busy-polls opens them (Config.BusyPoll), outside it.
func TestPoller(t *testing.T) {
	ns := newNetNS(t)
	for _, busy := range []bool{false, true} {
		t.Run(map[bool]string{false: "netpoller", true: "busypoll"}[busy], func(t *testing.T) {
			var a, b *Endpoint
			ns.do(t, func() { a, b = openPair0(t, "127.0.0.1", "127.0.0.2", func(c *Config) { c.BusyPoll = busy }) })
			defer a.Close()
			linktest.Poller(t, a, b)
		})
	}
}
