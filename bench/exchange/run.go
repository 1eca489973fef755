package exchange

import (
	"fmt"

	"github.com/goroce/goroce/bth"
)

// Tool is one of the perftest programs whose TCP exchange Run reproduces.
type Tool uint8

// The perftest tools (non-duplex, RUN_REGULAR, non RDMA-CM).
const (
	SendBW Tool = iota + 1
	WriteBW
	ReadBW
	AtomicBW
	SendLat
	WriteLat
	ReadLat
)

var toolNames = [...]string{
	SendBW: "ib_send_bw", WriteBW: "ib_write_bw", ReadBW: "ib_read_bw", AtomicBW: "ib_atomic_bw",
	SendLat: "ib_send_lat", WriteLat: "ib_write_lat", ReadLat: "ib_read_lat",
}

func (t Tool) String() string {
	if t >= SendBW && t <= ReadLat {
		return toolNames[t]
	}
	return fmt.Sprintf("Tool(%d)", uint8(t))
}

// Valid reports whether t is one of the seven tools.
func (t Tool) Valid() bool { return t >= SendBW && t <= ReadLat }

// ExchangesReports reports whether the tool swaps bandwidth reports at the
// end (ib_write_bw, ib_read_bw and ib_atomic_bw do, even half duplex, so
// that the server can print the client's result).
func (t Tool) ExchangesReports() bool { return t == WriteBW || t == ReadBW || t == AtomicBW }

// SendsDone reports whether the tool ends with ctx_close_connection (a last
// hand-shake and "done"); only ib_write_lat just closes the socket.
func (t Tool) SendsDone() bool { return t != WriteLat }

// HandShakes is the number of ctx_hand_shake exchanges the tool does with
// qps QPs (perftest -q), the one inside ctx_close_connection included.
func (t Tool) HandShakes(qps int) int {
	n := 2*qps + 1 // one per QP before and after ctx_connect, then QP 0's
	switch t {
	case SendBW, SendLat:
		n += 2 // start barrier, close
	case WriteBW, ReadBW, AtomicBW:
		n += 2 // end-of-test sync, close
	case WriteLat:
		n++ // start barrier
	case ReadLat:
		n += 2 // start barrier, close
	}
	return n
}

// Params is what both sides agreed before any QP exists.
type Params struct {
	RemoteVersion Version
	MTU           bth.MTU // min(local, remote) path MTU (check_mtu)
	Sys           SysData // max of both sides (check_sys_data)
}

// Steps are the caller's parts of a perftest run, called by Run at the
// points where perftest's main() does the same work.
type Steps struct {
	// LocalMTU is our active path MTU (perftest's set_mtu result).
	LocalMTU bth.MTU
	// Sys is our cycle buffer (page size) and cache line size.
	Sys SysData
	// Setup creates the QPs and memory with the agreed Params and returns
	// one PerftestDest per QP (ctx_init + set_up_connection). Required.
	Setup func(p Params) ([]PerftestDest, error)
	// Connect moves the QPs to RTR/RTS toward remote (ctx_connect; the peer
	// may start sending once the next hand-shake completes). Required.
	Connect func(remote []PerftestDest) error
	// Ready posts receives / prepares sends before the start barrier.
	// Optional.
	Ready func() error
	// Run runs the traffic and returns the report to send to the peer
	// (used by ib_write/read/atomic_bw only). For the server of those three
	// tools, Run is called right away: the real server only waits in the
	// next hand-shake while the client works, and sends a report it never
	// filled in. Optional.
	Run func() (BWReport, error)
	// Duplex runs the bidirectional sequence of perftest's -b (bandwidth
	// tools only): both sides Run, after a start hand-shake, and then
	// exchange reports.
	Duplex bool
	// Duration says the run is timed (-D): a duplex ib_send_bw then
	// exchanges no reports.
	Duration bool
}

// Result is what Run learned from the peer.
type Result struct {
	Params
	Local  []PerftestDest
	Remote []PerftestDest
	// RemoteReport is the peer's bandwidth report (ExchangesReports tools).
	RemoteReport BWReport
}

// Establish runs the part of tool's exchange that every run shares, up to
// and including the hand-shake that follows ctx_connect:
//
//	exchange_versions, check_sys_data, check_mtu, Setup,
//	hand-shake(dest[i]) for each QP, Connect, then
//	  send_bw, send_lat:  hand-shake(dest[0]), hand-shake(dest[i]) for each QP
//	  the others:         hand-shake(dest[i]) for each QP, hand-shake(dest[0])
//
// The real tool prints the remote keys of the second round; a peer whose
// second round differs from its first gets ErrKeysChanged. Run continues
// from here; so does a caller driving a sequence Run does not model
// (ib_send_bw -a).
func (s *PerftestSession) Establish(tool Tool, st Steps) (Result, error) {
	var res Result
	if !tool.Valid() {
		return res, fmt.Errorf("exchange: %w: tool %v", ErrConfig, tool)
	}
	if st.Setup == nil || st.Connect == nil {
		return res, fmt.Errorf("exchange: %w: Steps.Setup and Steps.Connect are required", ErrConfig)
	}
	var err error
	if res.RemoteVersion, err = s.ExchangeVersions(); err != nil {
		return res, err
	}
	if res.Sys, err = s.CheckSysData(st.Sys); err != nil {
		return res, err
	}
	if res.MTU, err = s.CheckMTU(st.LocalMTU); err != nil {
		return res, err
	}
	local, err := st.Setup(res.Params)
	if err != nil {
		return res, &StepError{Step: "setup", Err: err}
	}
	if len(local) == 0 {
		return res, &StepError{Step: "setup", Err: fmt.Errorf("%w: no QPs", ErrConfig)}
	}
	res.Local = local
	res.Remote = make([]PerftestDest, len(local))
	// The placement of QP 0's hand-shake is from bridge captures of -q 3,
	// rxe against rxe (testdata/README.md).
	seen := make(map[bth.QPN]int, len(local))
	for i := range local {
		if res.Remote[i], err = s.HandShake(local[i]); err != nil {
			return res, err
		}
		if j, dup := seen[res.Remote[i].QPN]; dup {
			return res, &StepError{Step: fmt.Sprintf("ctx_hand_shake #%d", s.handShakes), Err: fmt.Errorf("%w: our QPs %d and %d (of %d) both got remote QPN %#x",
				ErrQPCount, j, i, len(local), uint32(res.Remote[i].QPN))}
		}
		seen[res.Remote[i].QPN] = i
	}
	if err := st.Connect(res.Remote); err != nil {
		return res, &StepError{Step: "ctx_connect", Err: err}
	}
	sendTool := tool == SendBW || tool == SendLat
	if sendTool {
		if _, err = s.HandShake(local[0]); err != nil {
			return res, err
		}
	}
	for i := range local {
		again, err := s.HandShake(local[i])
		if err != nil {
			return res, err
		}
		if again != res.Remote[i] {
			return res, &StepError{Step: fmt.Sprintf("ctx_hand_shake #%d", s.handShakes), Err: fmt.Errorf("%w: QP %d: %+v, then %+v",
				ErrKeysChanged, i, res.Remote[i], again)}
		}
	}
	if !sendTool {
		if _, err = s.HandShake(local[0]); err != nil {
			return res, err
		}
	}
	return res, nil
}

// Run performs tool's whole exchange, as perftest 4.5+0.17 ("6.06") does it
// (see the package documentation for the message-by-message sequence):
// Establish, then per tool:
//
//	send_bw, send_lat:        Ready, hand-shake, Run, hand-shake, "done"
//	write_bw, read_bw, atomic: Ready, Run, hand-shake, reports, hand-shake, "done"
//	write_lat:                 Ready, hand-shake, Run (then the socket closes)
//	read_lat:                  Ready, hand-shake, Run, hand-shake, "done"
//
// With Steps.Duplex (perftest -b, bandwidth tools), both sides run:
//
//	send_bw:                   Ready, hand-shake, Run, reports (not with -D), hand-shake, "done"
//	write_bw, read_bw, atomic: Ready, hand-shake, Run, reports, hand-shake, "done"
//
// It does not close the connection.
func (s *PerftestSession) Run(tool Tool, st Steps) (Result, error) {
	if st.Duplex && tool != SendBW && !tool.ExchangesReports() {
		return Result{}, fmt.Errorf("exchange: %w: %v has no bidirectional mode", ErrConfig, tool)
	}
	res, err := s.Establish(tool, st)
	if err != nil {
		return res, err
	}
	local := res.Local
	if st.Ready != nil {
		if err := st.Ready(); err != nil {
			return res, &StepError{Step: "ready", Err: err}
		}
	}
	run := func() (BWReport, error) {
		if st.Run == nil {
			return BWReport{}, nil
		}
		r, err := st.Run()
		if err != nil {
			return r, &StepError{Step: "run", Err: err}
		}
		return r, nil
	}
	switch tool {
	case SendBW, SendLat:
		if _, err = s.HandShake(local[0]); err != nil {
			return res, err
		}
		rep, err := run()
		if err != nil {
			return res, err
		}
		if st.Duplex && !st.Duration {
			if res.RemoteReport, err = s.XchgBWReports(rep); err != nil {
				return res, err
			}
		}
		_, err = s.CloseConnection(local[0])
		return res, err
	case WriteBW, ReadBW, AtomicBW:
		if st.Duplex {
			if _, err = s.HandShake(local[0]); err != nil {
				return res, err
			}
			rep, err := run()
			if err != nil {
				return res, err
			}
			if res.RemoteReport, err = s.XchgBWReports(rep); err != nil {
				return res, err
			}
			_, err = s.CloseConnection(local[0])
			return res, err
		}
		rep, err := run()
		if err != nil {
			return res, err
		}
		if _, err = s.HandShake(local[0]); err != nil {
			return res, err
		}
		if res.RemoteReport, err = s.XchgBWReports(rep); err != nil {
			return res, err
		}
		_, err = s.CloseConnection(local[0])
		return res, err
	case ReadLat:
		// The client reads, then closes with ctx_close_connection; the
		// passive server goes to ctx_close_connection right away and waits
		// there (in the hand-shake's read) until the client is done
		// (read_lat.c: "Only Client post read request").
		if _, err = s.HandShake(local[0]); err != nil {
			return res, err
		}
		if _, err := run(); err != nil {
			return res, err
		}
		_, err = s.CloseConnection(local[0])
		return res, err
	default: // WriteLat
		if _, err = s.HandShake(local[0]); err != nil {
			return res, err
		}
		_, err = run()
		return res, err
	}
}
