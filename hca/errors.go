package hca

import (
	"errors"
	"fmt"

	"github.com/goroce/goroce/transport"
)

// Sentinel errors of the verbs API. Functions wrap them with context; test
// with errors.Is.
var (
	ErrClosed       = errors.New("hca: device closed")
	ErrInvalidArg   = errors.New("hca: invalid argument")
	ErrLimit        = errors.New("hca: device limit exceeded")
	ErrInUse        = errors.New("hca: resource in use")
	ErrWrongDevice  = errors.New("hca: object belongs to another device or PD")
	ErrNoGID        = errors.New("hca: no such GID index")
	ErrQPState      = errors.New("hca: invalid QP state transition")
	ErrAttrMask     = errors.New("hca: invalid QP attribute mask")
	ErrAccess       = errors.New("hca: memory access violation")
	ErrNotSupported = errors.New("hca: not supported")
	ErrCQOverflow   = errors.New("hca: completion queue overrun")
	ErrDestroyed    = errors.New("hca: object destroyed")
	ErrNoRoute      = errors.New("hca: cannot resolve destination")
)

// StateError reports an illegal QP state transition.
type StateError struct {
	Type     transport.QPType
	From, To transport.State
}

func (e *StateError) Error() string {
	return fmt.Sprintf("hca: %s QP cannot move from %s to %s", e.Type, e.From, e.To)
}

// Is makes a StateError match ErrQPState.
func (e *StateError) Is(target error) bool { return target == ErrQPState }

// MaskError reports required attributes that are missing or attributes that
// are not allowed in a transition.
type MaskError struct {
	Type     transport.QPType
	From, To transport.State
	Missing  transport.AttrMask
	Extra    transport.AttrMask
}

func (e *MaskError) Error() string {
	s := fmt.Sprintf("hca: %s QP %s->%s:", e.Type, e.From, e.To)
	if e.Missing != 0 {
		s += " missing required " + MaskString(e.Missing)
	}
	if e.Extra != 0 {
		if e.Missing != 0 {
			s += ";"
		}
		s += " attributes not allowed " + MaskString(e.Extra)
	}
	return s
}

// Is makes a MaskError match ErrAttrMask.
func (e *MaskError) Is(target error) bool { return target == ErrAttrMask }

var maskNames = []struct {
	m    transport.AttrMask
	name string
}{
	{transport.AttrState, "STATE"}, {transport.AttrCurState, "CUR_STATE"},
	{transport.AttrEnSQDAsyncNotify, "EN_SQD_ASYNC_NOTIFY"}, {transport.AttrAccessFlags, "ACCESS_FLAGS"},
	{transport.AttrPKeyIndex, "PKEY_INDEX"}, {transport.AttrPort, "PORT"}, {transport.AttrQKey, "QKEY"},
	{transport.AttrAV, "AV"}, {transport.AttrPathMTU, "PATH_MTU"}, {transport.AttrTimeout, "TIMEOUT"},
	{transport.AttrRetryCnt, "RETRY_CNT"}, {transport.AttrRNRRetry, "RNR_RETRY"},
	{transport.AttrRQPSN, "RQ_PSN"}, {transport.AttrMaxQPRdAtomic, "MAX_QP_RD_ATOMIC"},
	{transport.AttrAltPath, "ALT_PATH"}, {transport.AttrMinRNRTimer, "MIN_RNR_TIMER"},
	{transport.AttrSQPSN, "SQ_PSN"}, {transport.AttrMaxDestRdAtomic, "MAX_DEST_RD_ATOMIC"},
	{transport.AttrPathMigState, "PATH_MIG_STATE"}, {transport.AttrCap, "CAP"},
	{transport.AttrDestQPN, "DEST_QPN"},
}

// MaskString names the bits of m as IBV_QP_* suffixes joined by '|'.
func MaskString(m transport.AttrMask) string {
	s := ""
	for _, n := range maskNames {
		if m&n.m != 0 {
			if s != "" {
				s += "|"
			}
			s += n.name
			m &^= n.m
		}
	}
	if m != 0 {
		if s != "" {
			s += "|"
		}
		s += fmt.Sprintf("0x%x", uint32(m))
	}
	return s
}
