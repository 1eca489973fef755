package interop

import (
	"fmt"
	"strconv"
	"strings"
)

// RetransmitMismatch looks for a requester that resent a PSN as a different
// packet: in a correct go-back-N retransmission every PSN carries the opcode
// it carried the first time. lines are tshark fields "ip.src, ipv6.src,
// infiniband.bth.destqp, infiniband.bth.psn, infiniband.bth.opcode" (tab
// separated) of the request packets (SEND and RDMA WRITE opcodes) in
// capture order; only those sent from one of from are checked. It returns
// a description of the first mismatch, or "".
//
// rxe's requester (Linux 6.1, the interop guest) has been seen to break
// this after a retransmission timeout: it resent the first unacknowledged
// PSN as a zero-length RDMA WRITE ONLY and every later packet one PSN on,
// after which a correct responder (goroce's, as rxe's own) must NAK the
// FIRST that arrives inside a message as an invalid request.
func RetransmitMismatch(lines []string, from ...string) string {
	type key struct {
		src string
		qp  string
		psn uint32
	}
	sent := map[key]uint8{}
	for _, l := range lines {
		f := strings.Split(l, "\t")
		if len(f) != 5 {
			continue
		}
		src := f[0]
		if src == "" {
			src = f[1]
		}
		ok := false
		for _, s := range from {
			ok = ok || src == s
		}
		if !ok {
			continue
		}
		psn, err1 := strconv.ParseUint(f[3], 0, 32)
		op, err2 := strconv.ParseUint(f[4], 0, 8)
		if err1 != nil || err2 != nil {
			continue
		}
		k := key{src, f[2], uint32(psn)}
		if first, seen := sent[k]; !seen {
			sent[k] = uint8(op)
		} else if first != uint8(op) {
			return fmt.Sprintf("%s resent PSN %d to QP %s as opcode %d, first sent as opcode %d", src, psn, f[2], op, first)
		}
	}
	return ""
}
