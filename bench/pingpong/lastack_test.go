package pingpong

import (
	"net/netip"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/hca"
	"github.com/goroce/goroce/hca/link"
	"github.com/goroce/goroce/hca/link/memlink"
	"github.com/goroce/goroce/wire"
)

// dropLastACKs is the server's link: it drops every ACK whose MSN is msn,
// i.e. the ACK of the client's last message and of each retransmission of
// it, as if the server had exited right after its own last SEND.
type dropLastACKs struct {
	link.Endpoint
	msn  uint32
	kept [][]byte
}

func (d *dropLastACKs) Write(bufs [][]byte, offset int) (int, error) {
	d.kept = d.kept[:0]
	for _, b := range bufs {
		var p wire.Packet
		if p.Decode(b[offset:], wire.FramingIP) == nil && p.BTH().Opcode() == bth.OpRCAcknowledge && p.AETH().MSN() == d.msn {
			continue
		}
		d.kept = append(d.kept, b)
	}
	if _, err := d.Endpoint.Write(d.kept, offset); err != nil {
		return 0, err
	}
	return len(bufs), nil
}

// TestLastACKLost: when the ACK of the client's last SEND never comes, the
// client finishes after LastAckGrace (the server's last message proves the
// SEND arrived) and says so, instead of retransmitting forever under
// retry_cnt 7 as the C tools (and rxe) would.
func TestLastACKLost(t *testing.T) {
	const iters = 20
	a, b, err := memlink.Pair(memlink.Config{AddrsA: []netip.Addr{addrA}, AddrsB: []netip.Addr{addrB}})
	if err != nil {
		t.Fatal(err)
	}
	da, err := hca.Open(a, hca.Options{Name: "ga"})
	if err != nil {
		t.Fatal(err)
	}
	db, err := hca.Open(&dropLastACKs{Endpoint: b, msn: iters}, hca.Options{Name: "gb"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { da.Close(); db.Close() })
	cfg := Config{Type: hca.RC, Size: 64, Iters: iters, RxDepth: 8}
	cl, sv := run(t, da, db, cfg, nil)
	if cl.err != nil || sv.err != nil {
		t.Fatalf("client: %v\nserver: %v", cl.err, sv.err)
	}
	if !cl.res.LastSendUnacked || cl.res.Sends != iters-1 || cl.res.Recvs != iters {
		t.Errorf("client: LastSendUnacked %v, %d sends, %d receives; want true, %d, %d",
			cl.res.LastSendUnacked, cl.res.Sends, cl.res.Recvs, iters-1, iters)
	}
	if sv.res.LastSendUnacked || sv.res.Sends != iters || sv.res.Recvs != iters {
		t.Errorf("server: %+v", sv.res)
	}
	// The summary's time ends when the loop did, not after the grace.
	if got := cl.res.Usec; got >= float32(LastAckGrace.Microseconds()) {
		t.Errorf("client time %v us includes the %v grace", got, LastAckGrace)
	}
}
