package exchange

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"

	"github.com/goroce/goroce/bth"
)

// Message sizes of perftest's TCP exchange (perftest_communication.h).
const (
	// VersionLen is MAX_VERSION: the version string, NUL padded.
	VersionLen = 16
	// KeyMsgLen is KEY_MSG_SIZE, the keys message without a GID.
	KeyMsgLen = 59
	// KeyMsgLenGID is KEY_MSG_SIZE_GID, the keys message with a GID (RoCE).
	KeyMsgLenGID = 108
	// SysDataLen is the size of each check_sys_data word (a C int).
	SysDataLen = 4
	// MTUMsgLen is what check_mtu sends to peers of version >= 5.31:
	// sizeof(char[2]) holding "%d" of the ibv_mtu enum, e.g. "3\x00".
	MTUMsgLen = 2
	// mtuMsgLenOld is sizeof(int), sent to peers older than 5.31.
	mtuMsgLenOld = 4
)

// DefaultVersion is the version Debian bookworm's perftest (4.5+0.17)
// advertises. It is below 6.28, so a newer perftest that talks to us skips
// its binary negotiate_params step, and at or above 5.33, so every other
// step is in its current form.
const DefaultVersion = "6.06"

// PerftestDest is one QP's keys as perftest's ctx_hand_shake carries them
// (struct pingpong_dest in perftest_resources.h).
type PerftestDest struct {
	LID uint16
	// OutReads is the number of outstanding RDMA READ/atomic requests the
	// side allows (perftest -o; device max_qp_rd_atom by default: 128 on
	// rxe for read/atomic tests, 1 for send/write).
	OutReads uint16
	QPN      bth.QPN
	PSN      bth.PSN
	RKey     bth.RKey
	// VAddr is the remote buffer address RDMA WRITE/READ/ATOMIC target.
	VAddr uint64
	// GID in network byte order; not carried by the 59-byte message.
	GID [16]byte
	// SRQN is the XRC/DC SRQ number; 0 otherwise.
	SRQN uint32
}

// Keys message layout: "%04x:%04x:%06x:%06x:%08x:%016llx:" then either
// 16 x "%02x:" + "%08x:" (GID form) or "%08x" (no-GID form), then NUL.
const (
	kLIDOff   = 0
	kOutOff   = 5
	kQPNOff   = 10
	kPSNOff   = 17
	kRKeyOff  = 24
	kVAOff    = 33
	kGIDOff   = 50 // GID form: 16 x "hh:"
	kSRQNGID  = 98
	kSRQNNoG  = 50
	kLastSepG = 106
)

var keySeps = [...]int{4, 9, 16, 23, 32, 49}

func putKeysHead(b []byte, d PerftestDest) {
	putHex(b[kLIDOff:kLIDOff+4], uint64(d.LID))
	putHex(b[kOutOff:kOutOff+4], uint64(d.OutReads))
	putHex(b[kQPNOff:kQPNOff+6], uint64(d.QPN)&0xFFFFFF)
	putHex(b[kPSNOff:kPSNOff+6], uint64(d.PSN)&0xFFFFFF)
	putHex(b[kRKeyOff:kRKeyOff+8], uint64(d.RKey))
	putHex(b[kVAOff:kVAOff+16], d.VAddr)
	for _, off := range keySeps {
		b[off] = ':'
	}
}

// FormatPerftestGID returns the 108-byte keys message (KEY_PRINT_FMT_GID)
// that perftest sends when it uses a GID, which is always the case on RoCE.
func FormatPerftestGID(d PerftestDest) [KeyMsgLenGID]byte {
	var b [KeyMsgLenGID]byte
	putKeysHead(b[:], d)
	for i, g := range d.GID {
		off := kGIDOff + 3*i
		b[off] = hexDigits[g>>4]
		b[off+1] = hexDigits[g&0xF]
		b[off+2] = ':'
	}
	putHex(b[kSRQNGID:kSRQNGID+8], uint64(d.SRQN))
	b[kLastSepG] = ':'
	b[KeyMsgLenGID-1] = 0
	return b
}

// FormatPerftest returns the 59-byte keys message (KEY_PRINT_FMT) used when
// no GID index is set (native IB without -x). The GID is not carried.
func FormatPerftest(d PerftestDest) [KeyMsgLen]byte {
	var b [KeyMsgLen]byte
	putKeysHead(b[:], d)
	putHex(b[kSRQNNoG:kSRQNNoG+8], uint64(d.SRQN))
	b[KeyMsgLen-1] = 0
	return b
}

func parseKeysHead(msg string, b []byte) (PerftestDest, error) {
	var d PerftestDest
	for _, off := range keySeps {
		if b[off] != ':' {
			return d, newParseError(msg, fmt.Sprintf("separator@%d", off), b[off:off+1], ErrSeparator)
		}
	}
	fields := [...]struct {
		name     string
		off, len int
	}{
		{"LID", kLIDOff, 4}, {"OUT_READS", kOutOff, 4}, {"QPN", kQPNOff, 6},
		{"PSN", kPSNOff, 6}, {"RKEY", kRKeyOff, 8}, {"VADDR", kVAOff, 16},
	}
	var vals [len(fields)]uint64
	for i, f := range fields {
		v, ok := parseHex(b[f.off : f.off+f.len])
		if !ok {
			return d, newParseError(msg, f.name, b[f.off:f.off+f.len], ErrHex)
		}
		vals[i] = v
	}
	d.LID = uint16(vals[0])
	d.OutReads = uint16(vals[1])
	d.QPN = bth.QPN(vals[2])
	d.PSN = bth.PSN(vals[3])
	d.RKey = bth.RKey(vals[4])
	d.VAddr = vals[5]
	return d, nil
}

// ParsePerftestGID decodes a 108-byte keys message. It accepts exactly the
// output of perftest's sprintf (fixed widths, lowercase hex, ':' after
// every field including the last, trailing NUL).
func ParsePerftestGID(b []byte) (PerftestDest, error) {
	const msg = "perftest keys (GID)"
	if len(b) != KeyMsgLenGID {
		return PerftestDest{}, newParseError(msg, "length", b, ErrLength)
	}
	if b[KeyMsgLenGID-1] != 0 {
		return PerftestDest{}, newParseError(msg, "terminator", b[KeyMsgLenGID-1:], ErrTerminator)
	}
	d, err := parseKeysHead(msg, b)
	if err != nil {
		return PerftestDest{}, err
	}
	for i := range d.GID {
		off := kGIDOff + 3*i
		if b[off+2] != ':' {
			return PerftestDest{}, newParseError(msg, fmt.Sprintf("separator@%d", off+2), b[off+2:off+3], ErrSeparator)
		}
		v, ok := parseHex(b[off : off+2])
		if !ok {
			return PerftestDest{}, newParseError(msg, fmt.Sprintf("GID[%d]", i), b[off:off+2], ErrHex)
		}
		d.GID[i] = byte(v)
	}
	if b[kLastSepG] != ':' {
		return PerftestDest{}, newParseError(msg, fmt.Sprintf("separator@%d", kLastSepG), b[kLastSepG:kLastSepG+1], ErrSeparator)
	}
	v, ok := parseHex(b[kSRQNGID : kSRQNGID+8])
	if !ok {
		return PerftestDest{}, newParseError(msg, "SRQN", b[kSRQNGID:kSRQNGID+8], ErrHex)
	}
	d.SRQN = uint32(v)
	return d, nil
}

// ParsePerftest decodes a 59-byte keys message (no GID; GID stays zero).
func ParsePerftest(b []byte) (PerftestDest, error) {
	const msg = "perftest keys"
	if len(b) != KeyMsgLen {
		return PerftestDest{}, newParseError(msg, "length", b, ErrLength)
	}
	if b[KeyMsgLen-1] != 0 {
		return PerftestDest{}, newParseError(msg, "terminator", b[KeyMsgLen-1:], ErrTerminator)
	}
	d, err := parseKeysHead(msg, b)
	if err != nil {
		return PerftestDest{}, err
	}
	v, ok := parseHex(b[kSRQNNoG : kSRQNNoG+8])
	if !ok {
		return PerftestDest{}, newParseError(msg, "SRQN", b[kSRQNNoG:kSRQNNoG+8], ErrHex)
	}
	d.SRQN = uint32(v)
	return d, nil
}

// Version is a perftest version string ("6.06"). perftest compares versions
// numerically with atof, sometimes through a C float; the methods below do
// the same so that our choices match the real tool's at every threshold.
type Version struct {
	text string
	val  float64
}

// ParseVersionString validates s: digits, optionally a '.' and more digits,
// at most 15 characters.
func ParseVersionString(s string) (Version, error) {
	if len(s) == 0 || len(s) >= VersionLen {
		return Version{}, newParseError("version", "text", []byte(s), ErrVersion)
	}
	dot := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= '0' && c <= '9':
		case c == '.' && !dot && i > 0 && i < len(s)-1:
			dot = true
		default:
			return Version{}, newParseError("version", "text", []byte(s), ErrVersion)
		}
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return Version{}, newParseError("version", "text", []byte(s), ErrVersion)
	}
	return Version{text: s, val: v}, nil
}

// FormatVersion returns the 16-byte message: v's text, NUL padded (what
// strncpy(user_param.version, VERSION, 16) leaves in the buffer).
func FormatVersion(v Version) [VersionLen]byte {
	var b [VersionLen]byte
	copy(b[:], v.text)
	return b
}

// ParseVersion decodes a 16-byte version message: text up to the first NUL,
// NUL bytes after it.
func ParseVersion(b []byte) (Version, error) {
	if len(b) != VersionLen {
		return Version{}, newParseError("version", "length", b, ErrLength)
	}
	n := 0
	for n < len(b) && b[n] != 0 {
		n++
	}
	if n == len(b) {
		return Version{}, newParseError("version", "terminator", b, ErrTerminator)
	}
	for _, c := range b[n:] {
		if c != 0 {
			return Version{}, newParseError("version", "padding", b[n:], ErrTerminator)
		}
	}
	v, err := ParseVersionString(string(b[:n]))
	if err != nil {
		// Report all 16 bytes: the text alone may be empty.
		return Version{}, newParseError("version", "text", b, ErrVersion)
	}
	return v, nil
}

func (v Version) String() string { return v.text }

// IsZero reports whether v is the zero Version (not yet exchanged).
func (v Version) IsZero() bool { return v.text == "" }

// Float64 is atof of the version text.
func (v Version) Float64() float64 { return v.val }

// atLeast mirrors `atof(rem_version) >= x` (a double comparison).
func (v Version) atLeast(x float64) bool { return v.val >= x }

// atLeastFloat mirrors `float rem_vers = atof(...); rem_vers >= x`: the
// value is rounded to a C float first, so "5.31" is NOT >= 5.31 there.
func (v Version) atLeastFloat(x float64) bool { return float64(float32(v.val)) >= x }

// SysData is what check_sys_data exchanges: the cycle buffer (page size,
// perftest --cycle_buffer, 4096 by default) and the cache line size.
type SysData struct {
	CycleBuffer   int32
	CacheLineSize int32
}

func putSysWord(b []byte, v int32) { binary.BigEndian.PutUint32(b, uint32(v)) }

func sysWord(b []byte) int32 { return int32(binary.BigEndian.Uint32(b)) }

// FormatMTU returns check_mtu's 2-byte message: "%d" of the ibv_mtu enum and
// a NUL ("3\x00" for 1024).
func FormatMTU(m bth.MTU) ([MTUMsgLen]byte, error) {
	if !m.Valid() {
		return [MTUMsgLen]byte{}, fmt.Errorf("exchange: %w: MTU enum %d", ErrConfig, uint8(m))
	}
	return [MTUMsgLen]byte{'0' + byte(m), 0}, nil
}

// ParseMTU decodes check_mtu's message (2 bytes, or 4 from peers older than
// 5.31): an ASCII decimal ibv_mtu value followed by NUL. perftest itself
// applies strtol and ignores invalid values; we report them.
func ParseMTU(b []byte) (bth.MTU, error) {
	if len(b) != MTUMsgLen && len(b) != mtuMsgLenOld {
		return 0, newParseError("mtu", "length", b, ErrLength)
	}
	if b[0] < '0' || b[0] > '9' || b[1] != 0 || !bth.MTU(b[0]-'0').Valid() {
		return 0, newParseError("mtu", "value", b, ErrMTU)
	}
	return bth.MTU(b[0] - '0'), nil
}

// BWReport is struct bw_report_data as xchg_bw_reports sends it: every
// field big-endian, doubles as their byte-swapped IEEE-754 bits. The
// per-port fields travel only with perftest --report-per-port.
type BWReport struct {
	Size         uint64
	Iters        uint64
	BWPeak       float64
	BWAvg        float64
	MsgRateAvg   float64
	BWAvgP1      float64
	MsgRateAvgP1 float64
	BWAvgP2      float64
	MsgRateAvgP2 float64
}

func f64bits(f float64) uint64 { return math.Float64bits(f) }
