package hca

import "github.com/goroce/goroce/transport"

// transition is one row of the ibv_modify_qp state table: which attributes a
// transition requires and which it allows, per QP type. Mirrors
// drivers/infiniband/core/verbs.c qp_state_table (wire-spec §7).
type transition struct {
	req, opt [5]transport.AttrMask // indexed by qpIdx
}

func qpIdx(t transport.QPType) int {
	switch t {
	case transport.RC:
		return 0
	case transport.UC:
		return 1
	case transport.UD:
		return 2
	}
	return 4
}

const (
	aPKey     = transport.AttrPKeyIndex
	aPort     = transport.AttrPort
	aAccess   = transport.AttrAccessFlags
	aQKey     = transport.AttrQKey
	aAV       = transport.AttrAV
	aMTU      = transport.AttrPathMTU
	aDestQPN  = transport.AttrDestQPN
	aRQPSN    = transport.AttrRQPSN
	aSQPSN    = transport.AttrSQPSN
	aMaxDest  = transport.AttrMaxDestRdAtomic
	aMaxRd    = transport.AttrMaxQPRdAtomic
	aMinRNR   = transport.AttrMinRNRTimer
	aTimeout  = transport.AttrTimeout
	aRetry    = transport.AttrRetryCnt
	aRNRRetry = transport.AttrRNRRetry
	aCur      = transport.AttrCurState
	aAlt      = transport.AttrAltPath
	aMig      = transport.AttrPathMigState
	aSQDNote  = transport.AttrEnSQDAsyncNotify
)

type stPair struct{ from, to transport.State }

var (
	sReset = transport.StateReset
	sInit  = transport.StateInit
	sRTR   = transport.StateRTR
	sRTS   = transport.StateRTS
	sSQD   = transport.StateSQD
	sSQE   = transport.StateSQE
	sErr   = transport.StateErr
)

// rows: [RC, UC, UD]
func tr(rc, uc, ud, orc, ouc, oud transport.AttrMask) transition {
	return transition{req: [5]transport.AttrMask{rc, uc, ud}, opt: [5]transport.AttrMask{orc, ouc, oud}}
}

var stateTable = map[stPair]transition{
	{sReset, sInit}: tr(aPKey|aPort|aAccess, aPKey|aPort|aAccess, aPKey|aPort|aQKey, 0, 0, 0),
	{sInit, sInit}:  tr(0, 0, 0, aPKey|aPort|aAccess, aPKey|aPort|aAccess, aPKey|aPort|aQKey),
	{sInit, sRTR}: tr(aAV|aMTU|aDestQPN|aRQPSN|aMaxDest|aMinRNR, aAV|aMTU|aDestQPN|aRQPSN, 0,
		aAlt|aAccess|aPKey, aAlt|aAccess|aPKey, aPKey|aQKey),
	{sRTR, sRTS}: tr(aSQPSN|aTimeout|aRetry|aRNRRetry|aMaxRd, aSQPSN, aSQPSN,
		aCur|aAlt|aAccess|aMinRNR|aMig, aCur|aAlt|aAccess|aMig, aCur|aQKey),
	{sRTS, sRTS}: tr(0, 0, 0, aCur|aAccess|aAlt|aMig|aMinRNR, aCur|aAccess|aAlt|aMig, aCur|aQKey),
	{sRTS, sSQD}: tr(0, 0, 0, aSQDNote, aSQDNote, aSQDNote),
	{sSQD, sSQD}: tr(0, 0, 0,
		aPort|aAV|aTimeout|aRetry|aRNRRetry|aMaxRd|aMaxDest|aAlt|aAccess|aPKey|aMinRNR|aMig,
		aAV|aAlt|aAccess|aPKey|aMig, aPKey|aQKey),
	{sSQD, sRTS}: tr(0, 0, 0, aCur|aAlt|aAccess|aMinRNR|aMig, aCur|aAlt|aAccess|aMig, aCur|aQKey),
	{sSQE, sRTS}: tr(0, 0, 0, 0, aCur|aAccess, aCur|aQKey),
}

// checkTransition validates a modify from cur with mask (which may or may
// not contain AttrState) for a QP of type t. It returns the target state.
func checkTransition(t transport.QPType, cur transport.State, attr *transport.Attr, mask transport.AttrMask) (transport.State, error) {
	to := cur
	if mask&transport.AttrState != 0 {
		to = attr.State
	}
	if to > sErr {
		return cur, &StateError{Type: t, From: cur, To: to}
	}
	// Any state may go to RESET or ERR with no other attributes, not even
	// CUR_STATE (ib_modify_qp_is_ok: those rows have no optional ones).
	if to == sReset || to == sErr {
		extra := mask &^ transport.AttrState
		if extra != 0 {
			return cur, &MaskError{Type: t, From: cur, To: to, Extra: extra}
		}
		return to, nil
	}
	row, ok := stateTable[stPair{cur, to}]
	idx := qpIdx(t)
	if !ok || idx > 2 {
		return cur, &StateError{Type: t, From: cur, To: to}
	}
	if cur == sSQE && t == transport.RC {
		return cur, &StateError{Type: t, From: cur, To: to}
	}
	m := mask &^ transport.AttrState
	missing := row.req[idx] &^ m
	extra := m &^ (row.req[idx] | row.opt[idx])
	if missing != 0 || extra != 0 {
		return cur, &MaskError{Type: t, From: cur, To: to, Missing: missing, Extra: extra}
	}
	return to, nil
}
