package netcfg

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// nsInode identifies the network namespace of the calling thread.
func nsInode(t testing.TB) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

func TestNetNSDo(t *testing.T) {
	SkipUnlessRoot(t)
	ns, err := NewNetNS("")
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	outside := make(chan uint64, 1)
	go func() { outside <- nsInode(t) }()
	host := <-outside
	var inside uint64
	if err := ns.Do(func() error {
		inside = nsInode(t)
		l, err := LinkByName("lo")
		if err != nil {
			return err
		}
		if !l.Up {
			return errors.New("lo is down in a new namespace")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if inside == host {
		t.Fatalf("Do ran in the host namespace (inode %d)", host)
	}
	// Threads released by Do are back in the original namespace: run many
	// goroutines and check none of them lands inside.
	for range 50 {
		if err := ns.Do(func() error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	errs := make(chan error, 100)
	for range 100 {
		go func() {
			if got := nsInode(t); got != host {
				errs <- fmt.Errorf("goroutine in namespace %d, want %d", got, host)
				return
			}
			errs <- nil
		}()
	}
	for range 100 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	want := errors.New("from f")
	if err := ns.Do(func() error { return want }); err != want {
		t.Fatalf("Do returned %v, want f's error", err)
	}
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Fatalf("recovered %v, want the panic from f", r)
			}
		}()
		ns.Do(func() error { panic("boom") })
	}()
	// Do nests, on the same namespace and from inside it.
	if err := ns.Do(func() error {
		return ns.Do(func() error {
			if got := nsInode(t); got != inside {
				return fmt.Errorf("nested Do in namespace %d, want %d", got, inside)
			}
			return nil
		})
	}); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(ns.Path(), "/proc/") {
		t.Fatalf("Path of an anonymous namespace = %q", ns.Path())
	}
	ns.Close()
	if err := ns.Do(func() error { return nil }); !errors.Is(err, ErrNetNSClosed) {
		t.Fatalf("Do after Close: %v, want ErrNetNSClosed", err)
	}
	if err := ns.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	var nilNS *NetNS
	if err := nilNS.Do(func() error { return want }); err != want {
		t.Fatalf("nil NetNS Do: %v", err)
	}
}

func TestNamedNetNS(t *testing.T) {
	SkipUnlessRoot(t)
	name := fmt.Sprintf("goroce-test-%d", os.Getpid())
	ns, err := NewNetNS(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Delete() })
	if _, err := os.Stat("/run/netns/" + name); err != nil {
		t.Fatalf("named namespace not bind-mounted: %v", err)
	}
	if _, err := NewNetNS(name); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("creating %q twice: %v", name, err)
	}
	var inode uint64
	ns.Do(func() error { inode = nsInode(t); return nil })
	o, err := OpenNetNS(name)
	if err != nil {
		t.Fatal(err)
	}
	var inode2 uint64
	o.Do(func() error { inode2 = nsInode(t); return nil })
	o.Close()
	if inode != inode2 {
		t.Fatalf("OpenNetNS entered namespace %d, created %d", inode2, inode)
	}
	if err := ns.Delete(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat("/run/netns/" + name); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("after Delete: %v", err)
	}
	if _, err := OpenNetNS(name); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("OpenNetNS after Delete: %v", err)
	}
	for _, bad := range []string{"a/b", "..", "."} {
		if _, err := NewNetNS(bad); err == nil {
			t.Fatalf("NewNetNS(%q) succeeded", bad)
		}
	}
}

func TestTwoHosts(t *testing.T) {
	h := TwoHosts(t, TwoHostsOptions{MTU: 4200, IPv6: true})
	for _, x := range []*Host{&h.A, &h.B} {
		x.Do(t, func() error {
			l, err := LinkByName(x.Ifname)
			if err != nil {
				return err
			}
			if l.MTU != 4200 || !l.Up || l.Kind != "veth" || len(l.HardwareAddr) != 6 {
				return fmt.Errorf("%s: %+v", x.Ifname, l)
			}
			if mtu, err := InterfaceMTU(x.Ifname); err != nil || mtu != 4200 {
				return fmt.Errorf("InterfaceMTU = %d, %v", mtu, err)
			}
			addrs, err := Addrs(x.Ifname)
			if err != nil {
				return err
			}
			if len(addrs) < 2 || addrs[0] != x.Addr || addrs[1] != x.Addr6 {
				return fmt.Errorf("Addrs(%s) = %v, want [%v %v ...]", x.Ifname, addrs, x.Addr, x.Addr6)
			}
			if _, err := LinkByName(x.Ifname + "x"); !errors.Is(err, ErrNoInterface) {
				return fmt.Errorf("LinkByName of a missing interface: %v", err)
			}
			return nil
		})
	}
	if h.A.MAC.String() == h.B.MAC.String() {
		t.Fatalf("both ends have MAC %v", h.A.MAC)
	}
	// UDP from A to B over IPv4 and IPv6 through the veth.
	for _, dst := range []netip.Addr{h.B.Addr, h.B.Addr6} {
		if !udpDelivered(t, h, dst, 9999) {
			t.Fatalf("UDP to %v not delivered", dst)
		}
	}
}

// udpDelivered sends datagrams from A to dst:port in B and reports whether
// B received one within 2s.
func udpDelivered(t *testing.T, h *Hosts, dst netip.Addr, port int) bool {
	t.Helper()
	var rx *net.UDPConn
	h.B.Do(t, func() (err error) {
		rx, err = net.ListenUDP("udp", &net.UDPAddr{IP: dst.AsSlice(), Port: port})
		return err
	})
	defer rx.Close()
	var tx *net.UDPConn
	h.A.Do(t, func() (err error) {
		tx, err = net.DialUDP("udp", nil, &net.UDPAddr{IP: dst.AsSlice(), Port: port})
		return err
	})
	defer tx.Close()
	// Send again every 100ms for up to 2s: the first datagram may wait for
	// neighbour discovery longer than a short deadline on a loaded machine
	// (IPv6 flaked with a single 300ms try), and a check that expects a
	// drop must see every copy dropped anyway.
	buf := make([]byte, 16)
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); {
		if _, err := tx.Write([]byte("hello")); err != nil {
			t.Fatal(err)
		}
		rx.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		n, _, err := rx.ReadFromUDP(buf)
		if err == nil && string(buf[:n]) == "hello" {
			return true
		}
	}
	return false
}

func TestResolver(t *testing.T) {
	h := TwoHosts(t, TwoHostsOptions{IPv6: true})
	r := NewResolver(ResolverConfig{NetNS: h.A.NS, Interface: h.A.Ifname, Timeout: 300 * time.Millisecond})
	for _, dst := range []netip.Addr{h.B.Addr, h.B.Addr6} {
		mac, err := r.Resolve(dst)
		if err != nil {
			t.Fatalf("Resolve(%v): %v", dst, err)
		}
		if mac.String() != h.B.MAC.String() {
			t.Fatalf("Resolve(%v) = %v, want %v", dst, mac, h.B.MAC)
		}
	}
	// Routed destination: the MAC is the gateway's.
	if err := AddRoute(h.A.NS, netip.MustParsePrefix("10.100.0.0/24"), h.B.Addr, ""); err != nil {
		t.Fatal(err)
	}
	if mac, err := r.Resolve(netip.MustParsePrefix("10.100.0.7/32").Addr()); err != nil || mac.String() != h.B.MAC.String() {
		t.Fatalf("Resolve through a gateway = %v, %v; want %v", mac, err, h.B.MAC)
	}
	// Nobody answers for .77: the documented one-line error.
	start := time.Now()
	_, err := r.Resolve(netip.MustParseAddr("10.99.0.77"))
	want := "netcfg: no neighbour for 10.99.0.77 on veth-a (ARP did not answer within 300ms)"
	if err == nil || err.Error() != want || !errors.Is(err, ErrNoNeighbour) {
		t.Fatalf("Resolve(10.99.0.77) error = %v, want %q", err, want)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("unanswered resolution took %v", d)
	}
	_, err = r.Resolve(netip.MustParseAddr("fd99::77"))
	if err == nil || !strings.Contains(err.Error(), "NDP did not answer") {
		t.Fatalf("Resolve(fd99::77): %v", err)
	}
	for _, tc := range []struct{ dst, want string }{
		{"192.0.2.1", "no route to 192.0.2.1"},
		{"10.99.0.1", "local address"},
	} {
		if _, err := r.Resolve(netip.MustParseAddr(tc.dst)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("Resolve(%s) = %v, want error containing %q", tc.dst, err, tc.want)
		}
	}
	wrong := NewResolver(ResolverConfig{NetNS: h.A.NS, Interface: "eth7"})
	if _, err := wrong.Resolve(h.B.Addr); err == nil || !strings.Contains(err.Error(), "not eth7") {
		t.Fatalf("route through another interface: %v", err)
	}
	// The cache answers without the kernel: delete B's veth end and the
	// cached MAC is still returned; after Flush it is not.
	if err := SetDown(h.B.NS, h.B.Ifname); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Resolve(h.B.Addr); err != nil {
		t.Fatalf("cached Resolve: %v", err)
	}
	if _, err := r.Resolve(netip.Addr{}); err == nil {
		t.Fatal("Resolve of the zero Addr succeeded")
	}
}

func TestLoss(t *testing.T) {
	h := TwoHosts(t, TwoHostsOptions{})
	if _, err := os.Stat("/usr/sbin/nft"); err != nil {
		if _, lerr := lookNFT(); lerr != nil {
			t.Skip("nft not installed")
		}
	}
	if err := AddLoss(h.A.NS, h.A.Ifname, 100); err != nil {
		t.Fatal(err)
	}
	if udpDelivered(t, h, h.B.Addr, 4791) {
		t.Fatal("UDP to port 4791 delivered through a 100% loss rule")
	}
	if !udpDelivered(t, h, h.B.Addr, 4792) {
		t.Fatal("UDP to port 4792 dropped: the rule must only match RoCE")
	}
	if err := RemoveLoss(h.A.NS); err != nil {
		t.Fatal(err)
	}
	if !udpDelivered(t, h, h.B.Addr, 4791) {
		t.Fatal("UDP to 4791 dropped after RemoveLoss")
	}
	for _, p := range []int{0, -1, 101} {
		if err := AddLoss(h.A.NS, h.A.Ifname, p); err == nil {
			t.Fatalf("AddLoss(%d%%) succeeded", p)
		}
	}
	if err := AddLoss(h.A.NS, "nosuch0", 5); !errors.Is(err, ErrNoInterface) {
		t.Fatalf("AddLoss on a missing interface: %v", err)
	}
}

func TestConfigErrors(t *testing.T) {
	h := TwoHosts(t, TwoHostsOptions{})
	for name, err := range map[string]error{
		"SetUp":    SetUp(h.A.NS, "nosuch0"),
		"SetMTU":   SetMTU(h.A.NS, "nosuch0", 1500),
		"AddAddr":  AddAddr(h.A.NS, "nosuch0", netip.MustParsePrefix("10.1.1.1/24")),
		"DeleteLk": DeleteLink(h.A.NS, "nosuch0"),
	} {
		if !errors.Is(err, ErrNoInterface) || !strings.Contains(err.Error(), `"nosuch0"`) {
			t.Errorf("%s on a missing interface: %v", name, err)
		}
	}
	if err := AddAddr(h.A.NS, h.A.Ifname, h.A.Prefix); !errors.Is(err, ErrExists) {
		t.Errorf("adding an existing address: %v", err)
	}
	if err := AddAddr(h.A.NS, h.A.Ifname, netip.Prefix{}); err == nil {
		t.Error("AddAddr with an invalid prefix succeeded")
	}
	if err := VethPair("a-very-long-interface-name", "b", h.A.NS, h.B.NS, 0); err == nil {
		t.Error("VethPair with a 26-byte name succeeded")
	}
	if err := SetMTU(h.A.NS, h.A.Ifname, 9000); err != nil {
		t.Fatal(err)
	}
	if err := SetAlias(h.A.NS, h.A.Ifname, "marked"); err != nil {
		t.Fatal(err)
	}
	h.A.Do(t, func() error {
		l, err := LinkByName(h.A.Ifname)
		if err == nil && (l.MTU != 9000 || l.Alias != "marked") {
			err = fmt.Errorf("after SetMTU/SetAlias: %+v", l)
		}
		return err
	})
	if err := DeleteLink(h.A.NS, h.A.Ifname); err != nil {
		t.Fatal(err)
	}
	h.B.Do(t, func() error {
		if _, err := LinkByName(h.B.Ifname); !errors.Is(err, ErrNoInterface) {
			return fmt.Errorf("peer after deleting the veth: %v", err)
		}
		return nil
	})
}

func TestChainSuffix(t *testing.T) {
	for in, want := range map[string]string{"veth-a": "veth_a", "eth0": "eth0", "a.b@c": "a_b_c"} {
		if got := chainSuffix(in); got != want {
			t.Errorf("chainSuffix(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestAddAddrMapped: an IPv4-mapped prefix is the IPv4 prefix it maps
// (::ffff:10.77.0.9/120 is 10.77.0.9/24); the mask used to be built from
// the IPv6 length for the unmapped address (nil), on which netlink
// panicked. One shorter than /96 has no IPv4 equivalent and is refused.
func TestAddAddrMapped(t *testing.T) {
	h := TwoHosts(t, TwoHostsOptions{})
	if err := AddAddr(h.A.NS, h.A.Ifname, netip.MustParsePrefix("::ffff:10.77.0.9/120")); err != nil {
		t.Fatal(err)
	}
	if err := AddAddr(h.A.NS, h.A.Ifname, netip.MustParsePrefix("::ffff:10.78.0.9/64")); err == nil {
		t.Fatal("a mapped /64 added")
	}
	h.A.Do(t, func() error {
		addrs, err := Addrs(h.A.Ifname)
		if err != nil {
			return err
		}
		if !slices.Contains(addrs, netip.MustParseAddr("10.77.0.9")) {
			return fmt.Errorf("Addrs(%s) = %v, want 10.77.0.9 among them", h.A.Ifname, addrs)
		}
		return nil
	})
}
