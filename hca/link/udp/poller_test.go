package udp

import (
	"testing"

	"github.com/goroce/goroce/hca/link/linktest"
)

// link.Poller (linktest.Poller).
func TestPoller(t *testing.T) {
	ns := newNetNS(t)
	var a, b *Endpoint
	ns.do(t, func() { a, b = openPair0(t, "127.0.0.1", "127.0.0.2", nil) })
	defer a.Close()
	linktest.Poller(t, a, b)
}
