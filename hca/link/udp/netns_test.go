package udp

import (
	"net"
	"net/netip"
	"runtime"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// netNS is a fresh network namespace owned by a test: every socket test runs
// in one, so it neither disturbs nor is disturbed by other users of
// 127.0.0.1:4791 on the host, and sends traffic only to its own loopback.
type netNS struct{ h netns.NsHandle }

// newNetNS creates a namespace with lo up and the given extra addresses on
// lo (IPv6 without duplicate address detection). It skips unless root.
func newNetNS(t testing.TB, addrs ...string) *netNS {
	t.Helper()
	skipUnlessRoot(t)
	var n netNS
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		// This thread ends up in the new namespace and is never unlocked,
		// so the runtime discards it instead of reusing it.
		runtime.LockOSThread()
		n.h, err = netns.New()
		if err != nil {
			return
		}
		var lo netlink.Link
		if lo, err = netlink.LinkByName("lo"); err != nil {
			return
		}
		if err = netlink.LinkSetUp(lo); err != nil {
			return
		}
		for _, a := range addrs {
			p := netip.MustParsePrefix(a)
			ipn := &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
			if err = netlink.AddrAdd(lo, &netlink.Addr{IPNet: ipn, Flags: unix.IFA_F_NODAD}); err != nil {
				return
			}
		}
	}()
	<-done
	if err != nil {
		t.Fatalf("creating a network namespace: %v", err)
	}
	t.Cleanup(func() { n.h.Close() })
	return &n
}

// do runs f on a thread inside the namespace; sockets f creates stay in it.
func (n *netNS) do(t testing.TB, f func()) {
	t.Helper()
	done := make(chan error)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		if err := netns.Set(n.h); err != nil {
			done <- err
			return
		}
		f()
		done <- nil
	}()
	if err := <-done; err != nil {
		t.Fatalf("entering the network namespace: %v", err)
	}
}
