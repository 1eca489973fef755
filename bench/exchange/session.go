package exchange

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"syscall"

	"github.com/goroce/goroce/bth"
)

// Role says which side of perftest's exchange we are. The client is the
// side started with a server name; every symmetric exchange
// (ctx_xchg_data, ctx_hand_shake) has the client write then read and the
// server read then write.
type Role uint8

// Roles.
const (
	Client Role = iota + 1
	Server
)

func (r Role) String() string {
	switch r {
	case Client:
		return "client"
	case Server:
		return "server"
	}
	return fmt.Sprintf("Role(%d)", uint8(r))
}

// PerftestConfig selects how a PerftestSession talks.
type PerftestConfig struct {
	Role Role
	// Version we advertise; DefaultVersion ("6.06") when empty.
	Version string
	// NoGID selects the 59-byte keys message, which perftest uses when no
	// GID index is set (native IB without -x). RoCE always uses the 108-byte
	// GID form, the default.
	NoGID bool
	// ReportPerPort adds the four per-port doubles to the bandwidth reports
	// (perftest --report-per-port).
	ReportPerPort bool
}

// PerftestSession runs perftest's out-of-band TCP exchange (non RDMA-CM
// mode) over one connection. Each method is one of the functions perftest's
// main() calls; Run strings them together the way each tool does. Timeouts
// come from deadlines the caller sets on the connection. A session is not
// safe for concurrent use.
type PerftestSession struct {
	rw         io.ReadWriter
	cfg        PerftestConfig
	local      Version
	remote     Version
	handShakes int
}

// NewPerftestSession validates cfg and returns a session over rw (normally
// a *net.TCPConn on port DefaultPort).
func NewPerftestSession(rw io.ReadWriter, cfg PerftestConfig) (*PerftestSession, error) {
	if cfg.Role != Client && cfg.Role != Server {
		return nil, fmt.Errorf("exchange: %w: role %v", ErrConfig, cfg.Role)
	}
	if cfg.Version == "" {
		cfg.Version = DefaultVersion
	}
	v, err := ParseVersionString(cfg.Version)
	if err != nil {
		return nil, fmt.Errorf("exchange: %w: %w", ErrConfig, err)
	}
	return &PerftestSession{rw: rw, cfg: cfg, local: v}, nil
}

// RemoteVersion is the peer's version once ExchangeVersions has run.
func (s *PerftestSession) RemoteVersion() Version { return s.remote }

// HandShakes counts the ctx_hand_shake exchanges done so far (including the
// one inside CloseConnection).
func (s *PerftestSession) HandShakes() int { return s.handShakes }

// xchg is ctx_xchg_data_ethernet: client writes then reads, server reads
// then writes. out is written with one Write, in must be filled completely.
func (s *PerftestSession) xchg(step string, out, in []byte) error {
	if s.cfg.Role == Client {
		if err := writeAll(s.rw, out); err != nil {
			return &StepError{Step: step, Err: err}
		}
		if err := readFull(s.rw, in); err != nil {
			return &StepError{Step: step, Err: err}
		}
		return nil
	}
	if err := readFull(s.rw, in); err != nil {
		return &StepError{Step: step, Err: err}
	}
	if err := writeAll(s.rw, out); err != nil {
		return &StepError{Step: step, Err: err}
	}
	return nil
}

// ExchangeVersions is exchange_versions: 16 bytes each way.
func (s *PerftestSession) ExchangeVersions() (Version, error) {
	out := FormatVersion(s.local)
	var in [VersionLen]byte
	if err := s.xchg("exchange_versions", out[:], in[:]); err != nil {
		return Version{}, err
	}
	v, err := ParseVersion(in[:])
	if err != nil {
		return Version{}, &StepError{Step: "exchange_versions", Err: err}
	}
	s.remote = v
	return v, nil
}

func (s *PerftestSession) needRemote(step string) error {
	if s.remote.IsZero() {
		return &StepError{Step: step, Err: fmt.Errorf("%w: versions not exchanged yet", ErrConfig)}
	}
	return nil
}

// CheckSysData is check_sys_data: for peers of version >= 5.32, two
// big-endian 32-bit ints each way (cycle buffer, then cache line size).
// It returns the agreed values, the larger of local and remote for each,
// or local unchanged for older peers (nothing is sent then).
func (s *PerftestSession) CheckSysData(local SysData) (SysData, error) {
	if err := s.needRemote("check_sys_data"); err != nil {
		return local, err
	}
	if !s.remote.atLeast(5.32) {
		return local, nil
	}
	var out, in [SysDataLen]byte
	putSysWord(out[:], local.CycleBuffer)
	if err := s.xchg("check_sys_data cycle_buffer", out[:], in[:]); err != nil {
		return local, err
	}
	agreed := local
	agreed.CycleBuffer = max(agreed.CycleBuffer, sysWord(in[:]))
	putSysWord(out[:], local.CacheLineSize)
	if err := s.xchg("check_sys_data cache_line_size", out[:], in[:]); err != nil {
		return local, err
	}
	agreed.CacheLineSize = max(agreed.CacheLineSize, sysWord(in[:]))
	return agreed, nil
}

// CheckMTU is check_mtu for IB/RoCE connections: for peers of version >= 5.1
// it exchanges the ASCII ibv_mtu enum (2 bytes, or 4 to peers older than
// 5.31) and returns the smaller of local and the peer's value, which is
// the path MTU both sides then use. Older peers are not asked.
func (s *PerftestSession) CheckMTU(local bth.MTU) (bth.MTU, error) {
	out4 := [mtuMsgLenOld]byte{}
	m, err := FormatMTU(local)
	if err != nil {
		return 0, &StepError{Step: "check_mtu", Err: err}
	}
	if err := s.needRemote("check_mtu"); err != nil {
		return 0, err
	}
	if !s.remote.atLeastFloat(5.1) {
		return local, nil
	}
	n := MTUMsgLen
	if !s.remote.atLeastFloat(5.31) {
		n = mtuMsgLenOld
	}
	copy(out4[:], m[:])
	var in [mtuMsgLenOld]byte
	if err := s.xchg("check_mtu", out4[:n], in[:n]); err != nil {
		return 0, err
	}
	rem, err := ParseMTU(in[:n])
	if err != nil {
		return 0, &StepError{Step: "check_mtu", Err: err}
	}
	return min(local, rem), nil
}

// HandShake is ctx_hand_shake over TCP: one keys message each way.
func (s *PerftestSession) HandShake(local PerftestDest) (PerftestDest, error) {
	s.handShakes++
	step := fmt.Sprintf("ctx_hand_shake #%d", s.handShakes)
	var rem PerftestDest
	if s.cfg.NoGID {
		out := FormatPerftest(local)
		var in [KeyMsgLen]byte
		if err := s.xchg(step, out[:], in[:]); err != nil {
			return rem, err
		}
		d, err := ParsePerftest(in[:])
		if err != nil {
			return rem, &StepError{Step: step, Err: err}
		}
		return d, nil
	}
	out := FormatPerftestGID(local)
	var in [KeyMsgLenGID]byte
	if err := s.xchg(step, out[:], in[:]); err != nil {
		return rem, err
	}
	d, err := ParsePerftestGID(in[:])
	if err != nil {
		return rem, &StepError{Step: step, Err: err}
	}
	return d, nil
}

// XchgBWReports is xchg_bw_reports: size (8 bytes), iters (8 bytes, or 4 to
// peers older than 5.33), bw_peak, bw_avg, msgRate_avg (8 bytes each) and,
// with ReportPerPort, bw_avg_p1, msgRate_avg_p1, bw_avg_p2, msgRate_avg_p2;
// each value is a separate ctx_xchg_data round.
func (s *PerftestSession) XchgBWReports(local BWReport) (BWReport, error) {
	var rem BWReport
	if err := s.needRemote("xchg_bw_reports"); err != nil {
		return rem, err
	}
	itersLen := 8
	if !s.remote.atLeastFloat(5.33) {
		itersLen = 4
	}
	type item struct {
		name string
		n    int
		out  uint64
		in   *uint64
	}
	var peak, avg, rate, p1, r1, p2, r2 uint64
	items := []item{
		{"size", 8, local.Size, &rem.Size},
		{"iters", itersLen, local.Iters, &rem.Iters},
		{"bw_peak", 8, f64bits(local.BWPeak), &peak},
		{"bw_avg", 8, f64bits(local.BWAvg), &avg},
		{"msgRate_avg", 8, f64bits(local.MsgRateAvg), &rate},
	}
	if s.cfg.ReportPerPort {
		items = append(items,
			item{"bw_avg_p1", 8, f64bits(local.BWAvgP1), &p1},
			item{"msgRate_avg_p1", 8, f64bits(local.MsgRateAvgP1), &r1},
			item{"bw_avg_p2", 8, f64bits(local.BWAvgP2), &p2},
			item{"msgRate_avg_p2", 8, f64bits(local.MsgRateAvgP2), &r2},
		)
	}
	var out, in [8]byte
	for _, it := range items {
		if it.n == 4 {
			binary.BigEndian.PutUint32(out[:4], uint32(it.out))
		} else {
			binary.BigEndian.PutUint64(out[:], it.out)
		}
		if err := s.xchg("xchg_bw_reports "+it.name, out[:it.n], in[:it.n]); err != nil {
			return rem, err
		}
		if it.n == 4 {
			*it.in = uint64(binary.BigEndian.Uint32(in[:4]))
		} else {
			*it.in = binary.BigEndian.Uint64(in[:])
		}
	}
	rem.BWPeak = math.Float64frombits(peak)
	rem.BWAvg = math.Float64frombits(avg)
	rem.MsgRateAvg = math.Float64frombits(rate)
	rem.BWAvgP1 = math.Float64frombits(p1)
	rem.MsgRateAvgP1 = math.Float64frombits(r1)
	rem.BWAvgP2 = math.Float64frombits(p2)
	rem.MsgRateAvgP2 = math.Float64frombits(r2)
	return rem, nil
}

// CloseConnection is ctx_close_connection: a last hand-shake, then both
// sides write "done\x00" without waiting for each other and close. Each
// side closes with the other's "done" unread, so the kernel answers with a
// TCP reset (the captures show RST after the FINs): once the hand-shake has
// succeeded, a reset or a plain close while we send or read "done" is
// accepted, as is a peer that closes without sending it (perftest releases
// after 6.x). Other bytes than "done\x00", a partial "done" and other errors
// (a deadline) are reported.
func (s *PerftestSession) CloseConnection(local PerftestDest) (PerftestDest, error) {
	rem, err := s.HandShake(local)
	if err != nil {
		return rem, err
	}
	if err := writeAll(s.rw, doneMsg[:]); err != nil {
		if peerGone(err) {
			return rem, nil
		}
		return rem, &StepError{Step: `ctx_close_connection send "done"`, Err: err}
	}
	var in [len(doneMsg)]byte
	if err := readFull(s.rw, in[:]); err != nil {
		var sr *ShortReadError
		if errors.As(err, &sr) && sr.Got == 0 || peerGone(err) {
			return rem, nil
		}
		return rem, &StepError{Step: `ctx_close_connection read "done"`, Err: err}
	}
	if in != doneMsg {
		return rem, &StepError{Step: `ctx_close_connection read "done"`, Err: newParseError("done", "text", in[:], ErrDone)}
	}
	return rem, nil
}

// peerGone reports a connection the peer has closed or reset.
func peerGone(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}
