package exchange

import (
	"fmt"
	"io"

	"github.com/goroce/goroce/bth"
)

// DefaultPort is the TCP port of both the ibv_*_pingpong examples and
// perftest (18515).
const DefaultPort = 18515

// PingpongMsgLen is the size of one pingpong address record on the wire:
// sizeof "0000:000000:000000:00000000000000000000000000000000", trailing NUL
// included.
const PingpongMsgLen = 52

// SRQRecords is the number of records ibv_srq_pingpong sends each way
// (its MAX_QP); the records after the -q used ones are all-zero values.
const SRQRecords = 256

// doneMsg closes both the pingpong and the perftest exchanges: sizeof "done".
var doneMsg = [5]byte{'d', 'o', 'n', 'e', 0}

// PingpongDest is one QP's address as the pingpong examples exchange it
// (struct pingpong_dest in rdma-core's examples).
type PingpongDest struct {
	LID uint16
	QPN bth.QPN
	PSN bth.PSN
	// GID in network byte order, as ibv_query_gid returns it. All zero when
	// the tool runs without -g.
	GID [16]byte
}

// Pingpong record layout: "%04x:%06x:%06x:%s" + NUL.
const (
	ppLIDOff  = 0  // 4 hex digits
	ppQPNOff  = 5  // 6 hex digits
	ppPSNOff  = 12 // 6 hex digits
	ppGIDOff  = 19 // 32 hex digits
	ppNULOff  = 51
	ppGIDHexs = 32
)

// FormatPingpong returns the 52-byte record for d. QPN and PSN are masked to
// their 24 bits, as the wire carries them. The GID is printed the way
// gid_to_wire_gid does (each 32-bit word as %08x of its big-endian value),
// which is the 16 bytes in order as hex.
func FormatPingpong(d PingpongDest) [PingpongMsgLen]byte {
	var b [PingpongMsgLen]byte
	putHex(b[ppLIDOff:ppLIDOff+4], uint64(d.LID))
	b[4] = ':'
	putHex(b[ppQPNOff:ppQPNOff+6], uint64(d.QPN)&0xFFFFFF)
	b[11] = ':'
	putHex(b[ppPSNOff:ppPSNOff+6], uint64(d.PSN)&0xFFFFFF)
	b[18] = ':'
	for i, g := range d.GID {
		b[ppGIDOff+2*i] = hexDigits[g>>4]
		b[ppGIDOff+2*i+1] = hexDigits[g&0xF]
	}
	b[ppNULOff] = 0
	return b
}

// ParsePingpong decodes one 52-byte record. It accepts exactly what the
// tools' sprintf produces (fixed widths, lowercase hex, trailing NUL) and
// returns a *ParseError naming the field otherwise.
func ParsePingpong(b []byte) (PingpongDest, error) {
	const msg = "pingpong address"
	var d PingpongDest
	if len(b) != PingpongMsgLen {
		return d, newParseError(msg, "length", b, ErrLength)
	}
	for _, off := range [...]int{4, 11, 18} {
		if b[off] != ':' {
			return d, newParseError(msg, fmt.Sprintf("separator@%d", off), b[off:off+1], ErrSeparator)
		}
	}
	if b[ppNULOff] != 0 {
		return d, newParseError(msg, "terminator", b[ppNULOff:], ErrTerminator)
	}
	v, ok := parseHex(b[ppLIDOff : ppLIDOff+4])
	if !ok {
		return d, newParseError(msg, "LID", b[ppLIDOff:ppLIDOff+4], ErrHex)
	}
	d.LID = uint16(v)
	if v, ok = parseHex(b[ppQPNOff : ppQPNOff+6]); !ok {
		return d, newParseError(msg, "QPN", b[ppQPNOff:ppQPNOff+6], ErrHex)
	}
	d.QPN = bth.QPN(v)
	if v, ok = parseHex(b[ppPSNOff : ppPSNOff+6]); !ok {
		return d, newParseError(msg, "PSN", b[ppPSNOff:ppPSNOff+6], ErrHex)
	}
	d.PSN = bth.PSN(v)
	for i := range d.GID {
		v, ok = parseHex(b[ppGIDOff+2*i : ppGIDOff+2*i+2])
		if !ok {
			return PingpongDest{}, newParseError(msg, "GID", b[ppGIDOff:ppGIDOff+ppGIDHexs], ErrHex)
		}
		d.GID[i] = byte(v)
	}
	return d, nil
}

// PingpongClient runs the client side of the pingpong exchange on conn,
// which the caller has connected to the server (port DefaultPort) and on
// which it sets any deadline it wants:
//
//	client -> server  len(local) records of 52 bytes
//	server -> client  len(local) records of 52 bytes (sent after the server
//	                  moved its QPs to RTR/RTS)
//	client -> server  "done\x00" (5 bytes)
//
// Pass one record for ibv_rc/uc/ud_pingpong and SRQRecords (see SRQTable)
// for ibv_srq_pingpong. The caller connects its own QPs after this returns,
// as pp_client_exch_dest's callers do.
func PingpongClient(conn io.ReadWriter, local []PingpongDest) ([]PingpongDest, error) {
	if len(local) == 0 || len(local) > SRQRecords {
		return nil, &StepError{Step: "pingpong client", Err: fmt.Errorf("%w: %d records (want 1..%d)", ErrConfig, len(local), SRQRecords)}
	}
	if err := writeAll(conn, appendPingpong(nil, local)); err != nil {
		return nil, &StepError{Step: "send local address", Err: err}
	}
	remote, err := readPingpong(conn, len(local))
	if err != nil {
		return nil, err
	}
	if err := writeAll(conn, doneMsg[:]); err != nil {
		return remote, &StepError{Step: `send "done"`, Err: err}
	}
	return remote, nil
}

// PingpongServer runs the server side on an accepted conn. It reads
// records records (1, or SRQRecords for ibv_srq_pingpong), calls connect
// with them, which must bring the local QPs to RTR/RTS (the client starts
// sending as soon as it has our reply) and return exactly records local
// records, sends those, and waits for the client's "done". It returns the
// remote records.
func PingpongServer(conn io.ReadWriter, records int, connect func(remote []PingpongDest) ([]PingpongDest, error)) ([]PingpongDest, error) {
	if records <= 0 || records > SRQRecords {
		return nil, &StepError{Step: "pingpong server", Err: fmt.Errorf("%w: %d records (want 1..%d)", ErrConfig, records, SRQRecords)}
	}
	remote, err := readPingpong(conn, records)
	if err != nil {
		return nil, err
	}
	local, err := connect(remote)
	if err != nil {
		return remote, &StepError{Step: "connect QPs", Err: err}
	}
	if len(local) != records {
		return remote, &StepError{Step: "connect QPs", Err: fmt.Errorf("%w: connect returned %d records, want %d", ErrConfig, len(local), records)}
	}
	if err := writeAll(conn, appendPingpong(nil, local)); err != nil {
		return remote, &StepError{Step: "send local address", Err: err}
	}
	var done [len(doneMsg)]byte
	if err := readFull(conn, done[:]); err != nil {
		return remote, &StepError{Step: `read "done"`, Err: err}
	}
	if done != doneMsg {
		return remote, &StepError{Step: `read "done"`, Err: newParseError("done", "text", done[:], ErrDone)}
	}
	return remote, nil
}

// SRQTable pads the used QPs' records to the SRQRecords-entry table that
// ibv_srq_pingpong sends (its my_dest[MAX_QP] array, zeroed beyond -q).
func SRQTable(used []PingpongDest) ([]PingpongDest, error) {
	if len(used) > SRQRecords {
		return nil, fmt.Errorf("exchange: %w: %d QPs, srq_pingpong has room for %d", ErrConfig, len(used), SRQRecords)
	}
	t := make([]PingpongDest, SRQRecords)
	copy(t, used)
	return t, nil
}

func appendPingpong(b []byte, ds []PingpongDest) []byte {
	for _, d := range ds {
		m := FormatPingpong(d)
		b = append(b, m[:]...)
	}
	return b
}

func readPingpong(r io.Reader, n int) ([]PingpongDest, error) {
	var m [PingpongMsgLen]byte
	out := make([]PingpongDest, n)
	for i := range out {
		if err := readFull(r, m[:]); err != nil {
			return nil, &StepError{Step: fmt.Sprintf("read remote address [%d]", i), Err: err}
		}
		d, err := ParsePingpong(m[:])
		if err != nil {
			return nil, &StepError{Step: fmt.Sprintf("read remote address [%d]", i), Err: err}
		}
		out[i] = d
	}
	return out, nil
}
