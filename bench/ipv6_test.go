package bench

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/goroce/goroce/hca"
	"github.com/goroce/goroce/hca/link/memlink"
)

// --ipv6: without -x the run uses the device's first IPv6 GID that is not
// link-local (a link-local one only when it has no other), and the
// default stays the first IPv4 GID; a device without an IPv6 GID refuses
// --ipv6 by name.
func TestIPv6GID(t *testing.T) {
	addrs := func(s ...string) []netip.Addr {
		var a []netip.Addr
		for _, x := range s {
			a = append(a, netip.MustParseAddr(x))
		}
		return a
	}
	open := func(a, b []netip.Addr) (*hca.Device, *hca.Device) {
		la, lb, err := memlink.Pair(memlink.Config{QueueLen: 4096, Seed: 7, AddrsA: a, AddrsB: b})
		if err != nil {
			t.Fatal(err)
		}
		da, err := hca.Open(la, hca.Options{Name: "goroce0"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { da.Close() })
		db, err := hca.Open(lb, hca.Options{Name: "goroce1"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return da, db
	}
	gidAddr := func(d *hca.Device, idx int) netip.Addr {
		g, err := d.QueryGID(idx)
		if err != nil {
			t.Fatal(err)
		}
		return netip.AddrFrom16(g).Unmap()
	}
	for _, tc := range []struct {
		name   string
		a, b   []netip.Addr
		ipv6   bool
		want   string // the client's source address
		refuse bool
	}{
		{"default", addrs("fe80::1", "2001:db8::1", "192.0.2.1"), addrs("fe80::2", "2001:db8::2", "192.0.2.2"), false, "192.0.2.1", false},
		{"ipv6", addrs("192.0.2.1", "fe80::1", "2001:db8::1"), addrs("192.0.2.2", "fe80::2", "2001:db8::2"), true, "2001:db8::1", false},
		{"link-local only", addrs("192.0.2.1", "fe80::1"), addrs("192.0.2.2", "fe80::2"), true, "fe80::1", false},
		{"no IPv6", addrs("192.0.2.1"), addrs("192.0.2.2"), true, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			da, db := open(tc.a, tc.b)
			p := Params{Mode: ModeWriteBW, Size: 4096, Iters: 50, IPv6: tc.ipv6, GIDIndex: -1}
			c, _, err := RunLoopback(testCtx(t), da, db, p, Hooks{})
			if tc.refuse {
				if !errors.Is(err, ErrParams) || !strings.Contains(err.Error(), "no IPv6 GID") {
					t.Fatalf("--ipv6 on an IPv4-only device: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := gidAddr(da, c.GIDIndex); got.String() != tc.want {
				t.Fatalf("source GID index %d = %v, want %s", c.GIDIndex, got, tc.want)
			}
			checkBW(t, c.Results[0], 4096, 50, 1)
		})
	}
}
