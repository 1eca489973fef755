//go:build linux

package udp

import (
	"errors"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/wire"
)

// isGSO reports whether m carries a UDP_SEGMENT cmsg (its first, as write
// builds them).
func isGSO(m *unix.Mmsghdr) bool {
	if m.Hdr.Control == nil {
		return false
	}
	h := (*unix.Cmsghdr)(unsafe.Pointer(m.Hdr.Control))
	return h.Level == unix.IPPROTO_UDP && h.Type == unix.UDP_SEGMENT
}

// TestICRCPatchedCountsSent: TxICRCPatched counts frames that went out
// with a corrected ICRC, not frames whose correction was built for a send
// the kernel then refused, nor twice the frames of a refused GSO run that
// went again as datagrams (which the unconnected socket sends with ID 0,
// uncorrected).
func TestICRCPatchedCountsSent(t *testing.T) {
	t.Run("refused", func(t *testing.T) {
		ns := newNetNS(t)
		a, b := openPair(t, ns, "127.0.0.1", "127.0.0.2", func(c *Config) { c.NoConnect = true })
		defer a.Close()
		defer b.Close()
		if !a.GSO() {
			t.Skip("kernel has no UDP_SEGMENT")
		}
		refuse := true
		a.sendFault = func(uintptr, []unix.Mmsghdr) unix.Errno {
			if refuse {
				return unix.EPERM
			}
			return 0
		}
		fs := mustFrames(t, a, b, 0, 8, 1000) // one super-datagram: segments 1..7 corrected
		if w, err := a.Write(fs, 0); w != 0 || !errors.Is(err, unix.EPERM) {
			t.Fatalf("Write = %d, %v; want 0, EPERM", w, err)
		}
		if st := a.Stats(); st.TxFrames != 0 || st.TxErrors != 8 || st.TxICRCPatched != 0 || st.TxGSOBatches != 0 {
			t.Fatalf("stats %+v: want nothing sent, 8 frames refused, no ICRC counted as patched", st)
		}
		refuse = false
		if w, err := a.Write(fs, 0); w != 8 || err != nil {
			t.Fatalf("second Write = %d, %v; want 8", w, err)
		}
		readFrames(t, b, 8, func(got int, p *wire.Packet) {
			if int(p.BTH().PSN()) != got {
				t.Fatalf("frame %d has PSN %d", got, p.BTH().PSN())
			}
		})
		if st := a.Stats(); st.TxFrames != 8 || st.TxGSOBatches != 1 || st.TxICRCPatched != 7 {
			t.Fatalf("stats %+v: want one 8-segment super-datagram sent, 7 ICRCs patched", st)
		}
	})
	t.Run("gso-refused-resent", func(t *testing.T) {
		ns := newNetNS(t)
		a, b := openPair(t, ns, "127.0.0.1", "127.0.0.2", func(c *Config) { c.NoConnect = true })
		defer a.Close()
		defer b.Close()
		if !a.GSO() {
			t.Skip("kernel has no UDP_SEGMENT")
		}
		refused := 0
		a.sendFault = func(_ uintptr, msgs []unix.Mmsghdr) unix.Errno {
			if isGSO(&msgs[0]) {
				refused++
				return unix.EIO
			}
			return 0
		}
		if w, err := a.Write(mustFrames(t, a, b, 0, 8, 1000), 0); w != 8 || err != nil {
			t.Fatalf("Write = %d, %v; want 8", w, err)
		}
		readFrames(t, b, 8, func(got int, p *wire.Packet) {
			if int(p.BTH().PSN()) != got {
				t.Fatalf("frame %d has PSN %d", got, p.BTH().PSN())
			}
		})
		// The 8 went again as datagrams, each with ID 0 from the
		// unconnected socket: none patched.
		if st := a.Stats(); refused != 1 || st.TxFrames != 8 || st.TxGSOBatches != 0 || st.TxErrors != 0 || st.TxICRCPatched != 0 {
			t.Fatalf("%d super-datagrams refused, stats %+v: want 1, 8 frames sent as datagrams, none patched", refused, st)
		}
	})
}
