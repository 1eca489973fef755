package exchange_test

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/goroce/goroce/bench/exchange"
	"github.com/goroce/goroce/bth"
)

// tcpPair returns the two ends of a loopback TCP connection: buffered,
// as the tools' socket is (both sides write "done" without reading first).
func tcpPair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	acc := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		acc <- c
	}()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b := <-acc
	if b == nil {
		t.Fatal("accept failed")
	}
	return a, b
}

var v606, _ = exchange.ParseVersionString("6.06")

// perftestPeer plays one side of perftest's exchange message by message:
// a server reads before it writes, a client writes first. (The order of
// the whole multi-QP sequence is checked byte for byte against captures
// of the real tools: TestPerftestCaptures, *_q3.pcap.)
type perftestPeer struct {
	c      net.Conn
	client bool
}

func (p *perftestPeer) xchg(out []byte) ([]byte, error) {
	in := make([]byte, len(out))
	if p.client {
		if _, err := p.c.Write(out); err != nil {
			return nil, err
		}
	}
	if _, err := io.ReadFull(p.c, in); err != nil {
		return nil, err
	}
	if !p.client {
		if _, err := p.c.Write(out); err != nil {
			return nil, err
		}
	}
	return in, nil
}

// opening plays perftest 6.06's messages before the keys: the version,
// check_sys_data (cycle buffer 4096, cache line 64) and the MTU (1024).
func (p *perftestPeer) opening() error {
	ver := exchange.FormatVersion(v606)
	mtu, _ := exchange.FormatMTU(bth.MTU1024)
	for _, m := range [][]byte{ver[:], {0, 0, 0x10, 0}, {0, 0, 0, 64}, mtu[:]} {
		if _, err := p.xchg(m); err != nil {
			return err
		}
	}
	return nil
}

func (p *perftestPeer) keys(d exchange.PerftestDest) (exchange.PerftestDest, error) {
	m := exchange.FormatPerftestGID(d)
	in, err := p.xchg(m[:])
	if err != nil {
		return exchange.PerftestDest{}, err
	}
	return exchange.ParsePerftestGID(in)
}

// TestPerftestKeysChanged: a peer whose second round differs from its
// first is out of step; goroce says so instead of connecting to one set
// of keys and sending to the other.
func TestPerftestKeysChanged(t *testing.T) {
	a, b := tcpPair(t)
	defer a.Close()
	defer b.Close()
	deadline := time.Now().Add(10 * time.Second)
	a.SetDeadline(deadline)
	b.SetDeadline(deadline)
	theirs := dests(0x16, 2)
	go func() {
		p := &perftestPeer{c: b, client: true}
		p.opening()
		p.keys(theirs[0])
		p.keys(theirs[1])
		p.keys(theirs[1]) // QP 0's place in the second round
		b.Close()
	}()
	sess, err := exchange.NewPerftestSession(a, exchange.PerftestConfig{Role: exchange.Server})
	if err != nil {
		t.Fatal(err)
	}
	_, err = sess.Run(exchange.WriteBW, exchange.Steps{
		LocalMTU: bth.MTU1024, Sys: exchange.SysData{CycleBuffer: 4096, CacheLineSize: 64},
		Setup:   func(exchange.Params) ([]exchange.PerftestDest, error) { return dests(0x11, 2), nil },
		Connect: func([]exchange.PerftestDest) error { return nil },
	})
	if !errors.Is(err, exchange.ErrKeysChanged) {
		t.Fatalf("err = %v, want ErrKeysChanged", err)
	}
}

// TestPeerWithFewerQPs: our -q 2 against a real perftest with -q 1. The
// keys carry no QP count, so the second message we read in round one is
// the peer's QP 0 again; both our QPs used to be connected to the peer's
// one QP, after which each side waited for the other for ever. Now the
// exchange stops after round one with ErrQPCount, before ctx_connect.
func TestPeerWithFewerQPs(t *testing.T) {
	a, b := tcpPair(t)
	defer a.Close()
	defer b.Close()
	deadline := time.Now().Add(5 * time.Second)
	a.SetDeadline(deadline)
	b.SetDeadline(deadline)
	theirs := dests(0x16, 1)
	go func() {
		p := &perftestPeer{c: b, client: false} // perftest server, -q 1
		if p.opening() != nil {
			return
		}
		for {
			if _, err := p.keys(theirs[0]); err != nil {
				return
			}
		}
	}()
	sess, err := exchange.NewPerftestSession(a, exchange.PerftestConfig{Role: exchange.Client})
	if err != nil {
		t.Fatal(err)
	}
	connected := false
	_, err = sess.Establish(exchange.WriteBW, exchange.Steps{
		LocalMTU: bth.MTU1024, Sys: exchange.SysData{CycleBuffer: 4096, CacheLineSize: 64},
		Setup:   func(exchange.Params) ([]exchange.PerftestDest, error) { return dests(0x11, 2), nil },
		Connect: func([]exchange.PerftestDest) error { connected = true; return nil },
	})
	if !errors.Is(err, exchange.ErrQPCount) {
		t.Fatalf("Establish against a peer with fewer QPs: %v, want ErrQPCount", err)
	}
	if connected {
		t.Fatal("ctx_connect ran with two of our QPs on the peer's one")
	}
	t.Log(err)
}
