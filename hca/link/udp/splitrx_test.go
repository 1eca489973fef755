package udp

import (
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/hca/link"
	"github.com/goroce/goroce/wire"
)

// qpFrame builds an RC SEND_ONLY from a to b for destination QP qpn.
func qpFrame(t testing.TB, a, b *Endpoint, qpn bth.QPN, psn bth.PSN, payload int) []byte {
	t.Helper()
	addr := &wire.Addr{Kind: wire.KindRoCEv2IPv4, HopLimit: 64, DontFragment: true, SrcPort: a.SourcePort(),
		SrcIP: a.Addrs()[0], DstIP: b.Addrs()[0]}
	hr := addr.Headroom(wire.FramingIP)
	n := bth.HeaderLen + payload
	buf := make([]byte, hr+n+wire.Tailroom)
	bth.Header(buf[hr:]).Encode(&bth.Fields{Opcode: bth.OpRCSendOnly, PKey: 0xFFFF, DestQP: qpn, PSN: psn})
	f, err := wire.Finish(buf, hr, n, wire.FramingIP, addr)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// sendShort sends a 5-byte datagram, too short for a BTH, from an ordinary
// socket on 127.0.0.2 to 127.0.0.1:4791 in ns.
func sendShort(t *testing.T, ns *netNS) {
	t.Helper()
	ns.do(t, func() {
		c, err := net.DialUDP("udp4", &net.UDPAddr{IP: net.IP{127, 0, 0, 2}}, &net.UDPAddr{IP: net.IP{127, 0, 0, 1}, Port: int(DefaultPort)})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write([]byte("short")); err != nil {
			t.Fatal(err)
		}
	})
}

// SplitRx: every frame reaches exactly the reader of its DestQP mod n, GSO
// super-datagrams whole to one reader, and a datagram too short for a BTH
// reaches reader 0 only.
func TestSplitRx(t *testing.T) {
	t.Setenv(rxRingEnv, "") // the subtests choose
	t.Run("raw", func(t *testing.T) { testSplitRx(t, false) })
	t.Run("rxring", func(t *testing.T) { testSplitRx(t, true) })
}

// testSplitRx spreads 9 QPs over 3 receive queues, raw sockets or rings.
func testSplitRx(t *testing.T, ring bool) {
	ns := newNetNS(t)
	var a, b *Endpoint
	ns.do(t, func() { a, b = openPair0(t, "127.0.0.2", "127.0.0.1", func(c *Config) { c.RxRing = ring }) })
	defer a.Close()
	defer b.Close()
	const n = 3
	qs, err := b.SplitRx(n)
	if err != nil {
		t.Fatal(err)
	}
	if len(qs) != n-1 {
		t.Fatalf("SplitRx(%d) gave %d readers", n, len(qs))
	}
	if _, err := b.SplitRx(n); err == nil {
		t.Error("second SplitRx succeeded")
	}
	readers := append([]link.Reader{b}, qs...)
	const qps, perQP = 9, 20 // 20 consecutive PSNs of 1 KiB: GSO runs
	var batch [][]byte
	for q := range qps {
		for k := range perQP {
			batch = append(batch, qpFrame(t, a, b, bth.QPN(0x11+q), bth.PSN(k), 1024))
		}
	}
	var mu sync.Mutex
	got := make([]int, n)
	short := make([]int, n)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for i, r := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			bufs := make([][]byte, 16)
			for j := range bufs {
				bufs[j] = make([]byte, 2048)
			}
			sizes := make([]int, len(bufs))
			var p wire.Packet
			for {
				k, err := r.Read(bufs, sizes, 0)
				if err != nil {
					if !errors.Is(err, link.ErrClosed) {
						t.Errorf("reader %d: %v", i, err)
					}
					return
				}
				mu.Lock()
				for j := range k {
					f := bufs[j][:sizes[j]]
					if len(f) < ipv4Hdr+udpHdr+bth12 {
						short[i]++
						continue
					}
					if err := p.Decode(f, wire.FramingIP); err != nil {
						t.Errorf("reader %d: %v", i, err)
						continue
					}
					if int(p.DestQP)%n != i {
						t.Errorf("reader %d got DestQP %#x", i, p.DestQP)
					}
					got[i]++
				}
				mu.Unlock()
				select {
				case <-stop:
					return
				default:
				}
			}
		}()
	}
	if _, err := a.Write(batch, 0); err != nil {
		t.Fatal(err)
	}
	sendShort(t, ns)
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		total := got[0] + got[1] + got[2]
		sh := short[0] + short[1] + short[2]
		mu.Unlock()
		if total == qps*perQP && sh == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("received %v frames (want %d in all) and %v short ones; %+v", got, qps*perQP, short, b.Stats())
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(stop)
	b.Close() // unblocks the readers
	wg.Wait()
	for i := range n {
		if got[i] != qps/n*perQP {
			t.Errorf("reader %d: %d frames, want %d", i, got[i], qps/n*perQP)
		}
	}
	if short[0] != 1 {
		t.Errorf("short datagram reached readers %v, want reader 0 only", short)
	}
	s := b.Stats()
	if s.RxAggregates == 0 {
		t.Errorf("no GSO aggregate was received: %+v", s)
	}
	if ring != (s.RxRing > 0) {
		t.Errorf("RxRing %d with Config.RxRing %v", s.RxRing, ring)
	}
}
