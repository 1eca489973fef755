package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/hca"
	"github.com/goroce/goroce/transport"
)

// Side is one end of a connected QP with the resources it uses.
type Side struct {
	Dev *hca.Device
	PD  *hca.PD
	CQ  *hca.CQ
	QP  *hca.QP
	MR  *hca.MR
	Buf []byte
	// GIDIndex is the index of the GID this side uses.
	GIDIndex int
}

// PairConfig configures a pair of connected QPs in one process.
type PairConfig struct {
	Type    hca.QPType // RC (default), UC or UD
	BufSize int        // bytes registered on each side (default 1 MiB)
	MTU     bth.MTU    // path MTU (default: the smaller active MTU)
	Depth   int        // send and receive queue depth (default 128)
	// PSNA and PSNB are the start PSNs (default: fixed, distinct values).
	PSNA, PSNB bth.PSN
	Timeout    uint8 // local ACK timeout code (default 14, as perftest)
}

// Pair is two connected QPs on two devices.
type Pair struct {
	A, B *Side
	cfg  PairConfig
}

const allAccess = hca.AccessLocalWrite | hca.AccessRemoteWrite | hca.AccessRemoteRead | hca.AccessRemoteAtomic

// NewPair creates one QP on each device and connects them to RTS, as the
// pingpong examples do over TCP, but in process.
func NewPair(a, b *hca.Device, cfg PairConfig) (*Pair, error) {
	if cfg.Type == 0 {
		cfg.Type = hca.RC
	}
	if cfg.BufSize <= 0 {
		cfg.BufSize = 1 << 20
	}
	if cfg.Depth <= 0 {
		cfg.Depth = 128
	}
	if cfg.MTU == 0 {
		cfg.MTU = min(a.QueryPort().ActiveMTU, b.QueryPort().ActiveMTU)
	}
	if cfg.PSNA == 0 && cfg.PSNB == 0 {
		cfg.PSNA, cfg.PSNB = 0x1de136, 0xe02f7e
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 14
	}
	sa, err := newSide(a, &cfg)
	if err != nil {
		return nil, fmt.Errorf("bench: side A: %w", err)
	}
	sb, err := newSide(b, &cfg)
	if err != nil {
		sa.close()
		return nil, fmt.Errorf("bench: side B: %w", err)
	}
	p := &Pair{A: sa, B: sb, cfg: cfg}
	if err := connectSide(sa, sb, &cfg, cfg.PSNA, cfg.PSNB); err != nil {
		p.Close()
		return nil, err
	}
	if err := connectSide(sb, sa, &cfg, cfg.PSNB, cfg.PSNA); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// newSide makes one side's objects; on failure it destroys those it made.
func newSide(d *hca.Device, cfg *PairConfig) (_ *Side, err error) {
	s := &Side{Dev: d, GIDIndex: -1}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	for _, g := range d.GIDs() {
		if g.GID.Addr().Is4() { // prefer the IPv4 GID, as rdma-core users do with -g 1
			s.GIDIndex = g.Index
			break
		}
	}
	if s.GIDIndex < 0 {
		gids := d.GIDs()
		if len(gids) == 0 {
			return nil, fmt.Errorf("device %s has no GID (its link has no address)", d.Name())
		}
		s.GIDIndex = gids[0].Index
	}
	if s.PD, err = d.AllocPD(); err != nil {
		return nil, err
	}
	if s.CQ, err = d.CreateCQ(2*cfg.Depth + 8); err != nil {
		return nil, err
	}
	if s.QP, err = s.PD.CreateQP(hca.QPInitAttr{Type: cfg.Type, SendCQ: s.CQ, RecvCQ: s.CQ,
		Cap: hca.QPCap{MaxSendWR: cfg.Depth, MaxRecvWR: cfg.Depth, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return nil, err
	}
	s.Buf = make([]byte, cfg.BufSize)
	if s.MR, err = s.PD.RegMR(s.Buf, allAccess); err != nil {
		return nil, err
	}
	return s, nil
}

// connectSide moves l's QP through INIT, RTR and RTS towards r, with the
// attributes ibv_rc_pingpong and perftest use.
func connectSide(l, r *Side, cfg *PairConfig, lpsn, rpsn bth.PSN) error {
	typ := l.QP.Type()
	var a hca.QPAttr
	a.State, a.Port = hca.StateInit, 1
	mask := transport.AttrState | transport.AttrPKeyIndex | transport.AttrPort
	if typ == hca.UD {
		a.QKey = 0x11111111
		mask |= transport.AttrQKey
	} else {
		a.AccessFlags = hca.AccessRemoteWrite | hca.AccessRemoteRead | hca.AccessRemoteAtomic
		mask |= transport.AttrAccessFlags
	}
	if err := l.QP.Modify(&a, mask); err != nil {
		return err
	}
	rgid, err := r.Dev.QueryGID(r.GIDIndex)
	if err != nil {
		return err
	}
	a = hca.QPAttr{AH: hca.AHAttr{DGID: rgid, SGIDIndex: l.GIDIndex, HopLimit: 64}}
	a.State = hca.StateRTR
	mask = transport.AttrState
	if typ != hca.UD {
		a.PathMTU, a.DestQPN, a.RQPSN = cfg.MTU, r.QP.QPN(), rpsn
		mask |= transport.AttrAV | transport.AttrPathMTU | transport.AttrDestQPN | transport.AttrRQPSN
		if typ == hca.RC {
			a.MaxDestRdAtomic, a.MinRNRTimer = 16, 12
			mask |= transport.AttrMaxDestRdAtomic | transport.AttrMinRNRTimer
		}
	}
	if err := l.QP.Modify(&a, mask); err != nil {
		return err
	}
	a = hca.QPAttr{}
	a.State, a.SQPSN = hca.StateRTS, lpsn
	mask = transport.AttrState | transport.AttrSQPSN
	if typ == hca.RC {
		a.Timeout, a.RetryCnt, a.RNRRetry, a.MaxRdAtomic = cfg.Timeout, 7, 7, 16
		mask |= transport.AttrTimeout | transport.AttrRetryCnt | transport.AttrRNRRetry | transport.AttrMaxQPRdAtomic
	}
	return l.QP.Modify(&a, mask)
}

// Close destroys both QPs and their resources (not the devices).
func (p *Pair) Close() {
	p.A.close()
	p.B.close()
}

// close destroys what the side holds (any of it may be missing: newSide
// calls it on failure).
func (s *Side) close() {
	if s == nil {
		return
	}
	if s.QP != nil {
		s.QP.Destroy()
	}
	if s.MR != nil {
		s.MR.Dereg()
	}
	if s.CQ != nil {
		s.CQ.Destroy()
	}
	if s.PD != nil {
		s.PD.Dealloc()
	}
}

// WaitWC waits for one completion on cq, up to ctx.
func WaitWC(ctx context.Context, cq *hca.CQ) (hca.WC, error) {
	var wc [1]hca.WC
	for {
		n, err := cq.Poll(wc[:])
		if err != nil {
			return hca.WC{}, err
		}
		if n == 1 {
			return wc[0], nil
		}
		if err := cq.Wait(ctx); err != nil {
			return hca.WC{}, fmt.Errorf("waiting for a completion: %w", err)
		}
	}
}

// expectWC waits for one completion and checks its status and opcode.
func expectWC(ctx context.Context, cq *hca.CQ, op transport.WCOpcode, what string) (hca.WC, error) {
	wc, err := WaitWC(ctx, cq)
	if err != nil {
		return wc, fmt.Errorf("%s: %w", what, err)
	}
	if wc.Status != transport.StatusSuccess {
		return wc, fmt.Errorf("%s: completion status %q (%d)", what, wc.Status, wc.Status)
	}
	if wc.Opcode != op {
		return wc, fmt.Errorf("%s: completion opcode %d, want %d", what, wc.Opcode, op)
	}
	return wc, nil
}

func since(t time.Time) time.Duration { return time.Since(t) }
