package udp

import (
	"errors"
	"net"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/hca/netcfg"
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
	if len(addrs) > 0 {
		n.do(t, func() { err = waitLocalRoutes(addrs) })
		if err != nil {
			t.Fatal(err)
		}
	}
	return &n
}

// waitLocalRoutes waits until each address has its route in the local
// table (see netcfg.AddAddr: the kernel installs an IPv6 address's local
// route asynchronously, and a datagram sent before it exists is dropped).
func waitLocalRoutes(addrs []string) error {
	for _, a := range addrs {
		if err := netcfg.WaitLocalRoute(netip.MustParsePrefix(a).Addr(), 5*time.Second); err != nil {
			return err
		}
	}
	return nil
}

var errAborted = errors.New("aborted")

// do runs f on a thread inside the namespace; sockets f creates stay in it.
// f may call t.Fatal or t.Skip: do then ends the test the same way (a
// Goexit on f's goroutine would otherwise leave do waiting forever).
func (n *netNS) do(t testing.TB, f func()) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		returned := false
		defer func() {
			if !returned {
				done <- errAborted // t.Fatal, t.Skip (runtime.Goexit)
			}
		}()
		err := netns.Set(n.h)
		if err == nil {
			f()
		}
		returned = true
		done <- err
	}()
	switch err := <-done; {
	case err == errAborted && t.Skipped():
		t.SkipNow()
	case err == errAborted:
		t.FailNow()
	case err != nil:
		t.Fatalf("entering the network namespace: %v", err)
	}
}
