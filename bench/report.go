package bench

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/goroce/goroce/bench/exchange"
	"github.com/goroce/goroce/wire"
)

// resultLine is perftest's RESULT_LINE.
const resultLine = "---------------------------------------------------------------------------------------"

// ResultLine is perftest's RESULT_LINE, for callers printing around the
// report.
const ResultLine = resultLine

// PrintHeader prints perftest's ctx_print_test_info block and the
// local/remote address lines (ctx_print_pingpong_data) for r.
func PrintHeader(w io.Writer, r *Report) {
	p := &r.Params
	if r.Client && p.Mode.usesRd() {
		fmt.Fprintln(w, resultLine) // see PrintWaiting
	}
	fmt.Fprintln(w, resultLine)
	title := p.Mode.verb() + " "
	if p.Mode.atomic() {
		title += p.Atomic.String() + " "
	}
	if p.Duplex {
		title += "Bidirectional "
	}
	if p.PostList > 1 {
		title += "Post List "
	}
	if p.Mode.IsBW() {
		title += "BW Test"
	} else {
		title += "Latency Test"
	}
	fmt.Fprintf(w, "                    %s\n", title)
	fmt.Fprintf(w, " Dual-port       : OFF\t\tDevice         : %s\n", r.Device)
	fmt.Fprintf(w, " Number of qps   : %d\t\tTransport type : IB\n", p.QPs)
	srq := "OFF"
	if p.UseSRQ {
		srq = "ON"
	}
	fmt.Fprintf(w, " Connection type : %v\t\tUsing SRQ      : %s\n", p.Conn, srq)
	// perftest 6.06 prints whether its MRs ask for PCIe relaxed ordering
	// and whether it posts through the ibv_wr_* API: neither applies to a
	// software HCA.
	fmt.Fprintf(w, " PCIe relax order: OFF\n")
	fmt.Fprintf(w, " ibv_wr* API     : OFF\n")
	// The interop logs: only a client (or a -b side) prints its TX
	// depth, only a SEND server (or a -b side) its RX depth, latency
	// tests included.
	if r.Client || p.Duplex {
		fmt.Fprintf(w, " TX depth        : %d\n", p.TxDepth)
	}
	if p.PostList > 1 { // between the depths (interop logs of -l)
		fmt.Fprintf(w, " Post List       : %d\n", p.PostList)
	}
	if p.Mode.isSend() && (!r.Client || p.Duplex) {
		fmt.Fprintf(w, " RX depth        : %d\n", min(p.RxDepth, p.Iters))
	}
	if p.Mode.IsBW() {
		fmt.Fprintf(w, " CQ Moderation   : %d\n", p.CQMod)
	}
	fmt.Fprintf(w, " Mtu             : %d[B]\n", r.MTU.Bytes())
	fmt.Fprintf(w, " Link type       : %s\n", r.LinkType)
	fmt.Fprintf(w, " GID index       : %d\n", r.GIDIndex)
	if p.Mode.usesRd() {
		fmt.Fprintf(w, " Outstand reads  : %d\n", outReads(r.Local))
	}
	if !p.Mode.isRead() && !p.Mode.atomic() {
		fmt.Fprintf(w, " Max inline data : %d[B]\n", p.InlineSize)
	}
	fmt.Fprintf(w, " rdma_cm QPs\t : OFF\n")
	fmt.Fprintf(w, " Data ex. method : Ethernet\n")
	fmt.Fprintln(w, resultLine)
	for _, d := range r.Local {
		printDest(w, "local", d, p.Mode)
	}
	for _, d := range r.Remote {
		printDest(w, "remote", d, p.Mode)
	}
	fmt.Fprintln(w, resultLine)
	if passiveReadLat(r) {
		return // ib_read_lat's server prints no table
	}
	printTableHead(w, p)
}

// printTableHead prints the column titles of the result table
// (RESULT_FMT, RESULT_FMT_G, RESULT_FMT_LAT or RESULT_FMT_LAT_DUR).
func printTableHead(w io.Writer, p *Params) {
	if p.Mode.IsBW() {
		if p.ReportGbits {
			fmt.Fprint(w, " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]")
		} else {
			fmt.Fprint(w, " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]")
		}
	} else if p.Duration > 0 {
		fmt.Fprint(w, " #bytes        #iterations       t_avg[usec]    tps average") // RESULT_FMT_LAT_DUR
	} else {
		fmt.Fprint(w, " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ")
	}
	if p.CPUUtil {
		fmt.Fprint(w, "    CPU_Util[%]") // RESULT_EXT_CPU_UTIL
	}
	fmt.Fprintln(w)
}

// reportEnd ends a result line: REPORT_EXT, or REPORT_EXT_CPU_UTIL with
// the CPU utilization.
func reportEnd(w io.Writer, p *Params, res Result) {
	if p.CPUUtil {
		fmt.Fprintf(w, "\t    %-3.2f\n", res.CPUUtil)
		return
	}
	fmt.Fprintln(w)
}

// passiveReadLat reports whether r is ib_read_lat's server side, which
// measures nothing and prints no table.
func passiveReadLat(r *Report) bool { return r.Params.Mode == ModeReadLat && !r.Client }

// PrintWaiting prints what perftest's server prints before a client
// connects. ib_read_bw, ib_read_lat and ib_atomic_bw print one more
// RESULT_LINE first, on both sides (the interop logs of perftest 6.06).
func PrintWaiting(w io.Writer, m Mode) {
	if m.usesRd() {
		fmt.Fprintln(w, resultLine)
	}
	fmt.Fprintln(w, "\n************************************")
	fmt.Fprintln(w, "* Waiting for client to connect... *")
	fmt.Fprintln(w, "************************************")
}

func outReads(ds []exchange.PerftestDest) int {
	if len(ds) == 0 {
		return 0
	}
	return int(ds[0].OutReads)
}

// printDest is ctx_print_pingpong_data for RoCE (GID form).
func printDest(w io.Writer, side string, d exchange.PerftestDest, m Mode) {
	fmt.Fprintf(w, " %s address: LID %s QPN %s PSN %s", side, cHex(uint64(d.LID), 4), cHex(uint64(d.QPN), 6), cHex(uint64(d.PSN), 6))
	// ib_atomic_bw prints neither (interop logs), the read tools both,
	// the write tools the key and address.
	if m.isRead() {
		fmt.Fprintf(w, " OUT %s", cHex(uint64(d.OutReads), 4))
	}
	if !m.isSend() && !m.atomic() {
		fmt.Fprintf(w, " RKey %s VAddr %s", cHex(uint64(d.RKey), 8), cHex(d.VAddr, 16))
	}
	fmt.Fprintln(w)
	var g strings.Builder
	for i, b := range d.GID {
		if i > 0 {
			g.WriteByte(':')
		}
		fmt.Fprintf(&g, "%02d", b)
	}
	fmt.Fprintf(w, " GID: %s\n", g.String())
}

// cHex is C's printf("%#0*x", width, v): "0x" counts in the width and is
// left out for 0 ("0000" for %#04x of 0, "0x0013" for %#06x of 0x13).
func cHex(v uint64, width int) string {
	if v == 0 {
		return fmt.Sprintf("%0*x", width, v)
	}
	return fmt.Sprintf("0x%0*x", max(0, width-2), v)
}

// PrintResult prints one line of the result table (REPORT_FMT or
// REPORT_FMT_LAT).
func PrintResult(w io.Writer, r *Report, res Result) {
	if r.Params.Mode.IsBW() {
		f := mbFactor(r.Params.ReportGbits)
		b := res.BW
		fmt.Fprintf(w, " %-7d    %-10d       %-7.2f            %-7.2f\t\t   %-7.6f",
			b.Size, reportIters(r.Params, b), b.PeakBytesPerSec/f, b.BytesPerSec/f, b.MsgPerSec/1e6)
		reportEnd(w, &r.Params, res)
		return
	}
	l := res.Lat
	us := func(d time.Duration) float64 { return float64(d) / 1e3 }
	if r.Params.Duration > 0 {
		// REPORT_FMT_LAT_DUR: the average and the round trips per
		// second (a sample is half a round trip, a READ's a whole one).
		rtt := 2.0
		if r.Params.Mode == ModeReadLat {
			rtt = 1
		}
		tps := 0.0
		if l.Avg > 0 {
			tps = 1e6 / (rtt * us(l.Avg))
		}
		fmt.Fprintf(w, " %-7d       %d            %-7.2f        %-7.2f", l.Size, l.Iters, us(l.Avg), tps)
		reportEnd(w, &r.Params, res)
		return
	}
	if len(l.Samples) > 0 && (r.Params.Histogram || r.Params.Unsorted) {
		printSamples(w, r, l.Samples)
	}
	// REPORT_FMT_LAT of perftest 6.06, spaces and tabs as its ib_send_lat
	// prints them (the interop logs).
	fmt.Fprintf(w, " %-7d %d          %-7.2f        %-7.2f      %-7.2f  \t       %-7.2f     \t%-7.2f\t\t%-7.2f \t\t%-7.2f",
		l.Size, l.Iters, us(l.Min), us(l.Max), us(l.Typical), us(l.Avg), us(l.Stdev), us(l.P99), us(l.P999))
	reportEnd(w, &r.Params, res)
}

// The units of perftest's --output, which replaces every line of the report
// with one figure per result.
const (
	OutputBandwidth   = "bandwidth"    // the average bandwidth, MB/sec (Gb/sec with --report_gbits)
	OutputMessageRate = "message_rate" // the average message rate, Mpps
	OutputLatency     = "latency"      // the average latency, usec
)

// CheckOutput reports whether units suits mode m, with perftest's message
// when it does not.
func CheckOutput(m Mode, units string) error {
	switch {
	case m.IsBW() && units != OutputBandwidth && units != OutputMessageRate:
		return fmt.Errorf("--output=%s: Output verbosity level for BW can be: %s, %s", units, OutputBandwidth, OutputMessageRate)
	case !m.IsBW() && units != OutputLatency:
		return fmt.Errorf("--output=%s: Output verbosity level for LAT can be: %s", units, OutputLatency)
	}
	return nil
}

// PrintValue prints res as perftest's --output=units does
// (print_full_bw_report, print_report_lat): the one figure, "%lf\n".
func PrintValue(w io.Writer, r *Report, res Result, units string) {
	var v float64
	switch units {
	case OutputBandwidth:
		v = res.BW.BytesPerSec / mbFactor(r.Params.ReportGbits)
	case OutputMessageRate:
		v = res.BW.MsgPerSec / 1e6
	default:
		v = float64(res.Lat.Avg) / 1e3
	}
	fmt.Fprintf(w, "%f\n", v)
}

// printSamples prints what print_report_lat prints for -U and -H before
// the result: "#, usec", then "N, value" per sample (C's %g), in the
// order measured (-U) and sorted without the two largest (-H), and the
// table head again.
func printSamples(w io.Writer, r *Report, samples []time.Duration) {
	list := func(s []time.Duration) {
		fmt.Fprintln(w, "#, usec")
		for i, d := range s {
			fmt.Fprintf(w, "%d, %.6g\n", i+1, float64(d)/1e3)
		}
	}
	if r.Params.Unsorted {
		list(samples)
	}
	if r.Params.Histogram {
		sorted := append([]time.Duration(nil), samples...)
		sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
		if len(sorted) > latMeasureTail {
			sorted = sorted[:len(sorted)-latMeasureTail]
		}
		list(sorted)
	}
	fmt.Fprintln(w, resultLine)
	printTableHead(w, &r.Params)
}

// reportIters is perftest's #iterations of a bandwidth result, also the
// iterations of its report to the peer: with -n, every QP's messages
// (print_report_bw multiplies by num_of_qps: ib_write_bw -q 4 -n 200 prints
// 800, in the interop captures); with -D, the count per QP.
func reportIters(p Params, b BWResult) int {
	if p.Duration > 0 {
		return b.Iters
	}
	return b.Messages
}

// PrintFooter ends the table, and prints the ceiling ratio when measured.
func PrintFooter(w io.Writer, r *Report) {
	if passiveReadLat(r) {
		return
	}
	if s := r.Sides; s != nil && r.Params.ReportBoth {
		// write_bw.c, send_bw.c, read_bw.c: each side's own line under
		// its own table head (the CPU utilization is this side's on both,
		// as print_full_bw_report computes it from the local parameters).
		for _, b := range []struct {
			title string
			res   Result
		}{{"Local", s.Local}, {"Remote", s.Remote}} {
			fmt.Fprintln(w, resultLine)
			fmt.Fprintf(w, "\n %s results: \n", b.title)
			fmt.Fprintln(w, resultLine)
			printTableHead(w, &r.Params)
			PrintResult(w, r, b.res)
		}
	}
	fmt.Fprintln(w, resultLine)
	if c := r.Ceiling; c != nil {
		how := ""
		if c.Slices > 0 {
			how = fmt.Sprintf(" (median of %d slices; whole blast %.0f/s)", c.Slices, c.AveragePacketsPerSec)
		}
		if len(c.Blasts) == 2 {
			how += fmt.Sprintf(", the better of blasts before and after the run (%.2f and %.2f MB/sec)",
				c.Blasts[0]/(1<<20), c.Blasts[1]/(1<<20))
		}
		fmt.Fprintf(w, " Raw UDP path ceiling: %d-byte datagrams, %.0f/s delivered%s = %.2f MB/sec of %d-byte payloads\n",
			c.PacketBytes, c.PacketsPerSec, how, c.PayloadBytesPerSec/(1<<20), c.Payload)
		fmt.Fprintf(w, " goroce / raw UDP ceiling: %.3f\n", r.CeilingRatio)
	}
	if c := r.ShapedCeiling; c != nil {
		fmt.Fprintf(w, " Shaped UDP ceiling (the same blast with RoCE's datagrams of one %d-byte message: %s): %.0f messages/s = %.2f MB/sec\n",
			c.Payload, shapeString(c.MessageShape), c.PacketsPerSec, c.PayloadBytesPerSec/(1<<20))
		if o, ok := r.ShapedOfRaw(); ok {
			fmt.Fprintf(w, " shaped / raw UDP ceiling: %.3f (the most a RoCE sender that cost nothing could reach here)\n", o)
		}
		fmt.Fprintf(w, " goroce / shaped UDP ceiling: %.3f\n", r.ShapedCeilingRatio)
	}
	if c := r.LinkCeiling; c != nil {
		fmt.Fprintf(w, " Link ceiling (same blast through the link endpoints): %.0f packets/s = %.2f MB/sec of payload\n",
			c.PacketsPerSec, c.PayloadBytesPerSec/(1<<20))
		fmt.Fprintf(w, " goroce / link ceiling: %.3f\n", r.LinkCeilingRatio)
	}
	if r.Ceiling != nil || r.LinkCeiling != nil {
		fmt.Fprintln(w, resultLine)
	}
}

// shapeString writes a message shape as its runs of equal sizes:
// "4128 + 15 x 4112 B".
func shapeString(shape []int) string {
	var b strings.Builder
	for i := 0; i < len(shape); {
		j := i + 1
		for j < len(shape) && shape[j] == shape[i] {
			j++
		}
		if i > 0 {
			b.WriteString(" + ")
		}
		if j-i > 1 {
			fmt.Fprintf(&b, "%d x ", j-i)
		}
		fmt.Fprintf(&b, "%d", shape[i])
		i = j
	}
	b.WriteString(" B")
	return b.String()
}

// JSONReport is the --json document.
type JSONReport struct {
	Mode string `json:"mode"`
	Role string `json:"role"`
	// Reversed: perftest's --reversed swapped the roles; Role is the
	// test's (the client is the side that sends, whoever dialed).
	Reversed bool   `json:"reversed,omitempty"`
	Conn     string `json:"connection"` // RC, UC or UD
	Device   string `json:"device"`
	Atomic   string `json:"atomic,omitempty"`
	QPs      int    `json:"qps"`
	MTU      int    `json:"mtu"`
	GIDIndex int    `json:"gid_index"`
	TxDepth  int    `json:"tx_depth"`
	CQMod    int    `json:"cq_moderation,omitempty"`
	// Bidirectional (-b): each result is the sum of both sides'.
	Bidirectional bool    `json:"bidirectional,omitempty"`
	DurationS     float64 `json:"duration_s,omitempty"`
	Peer          string  `json:"peer_version"`
	LocalQPNs     []int   `json:"local_qpns"`
	RemoteQPNs    []int   `json:"remote_qpns"`
	// ICRC names the CRC-32 implementation this process computes ICRCs
	// with (wire.CRCImplementation): it decides a good part of the
	// bandwidth, and it is picked by timing at start-up.
	ICRC string `json:"icrc_implementation"`
	// Results: bandwidth in bytes/s (and MB/s as perftest prints, MB =
	// 2^20), latency in microseconds.
	Results          []JSONResult `json:"results"`
	CeilingRatio     *float64     `json:"ceiling_ratio,omitempty"`
	Ceiling          *Ceiling     `json:"ceiling,omitempty"`
	LinkCeilingRatio *float64     `json:"link_ceiling_ratio,omitempty"`
	LinkCeiling      *Ceiling     `json:"link_ceiling,omitempty"`
	// ShapedCeilingRatio is goroce's bandwidth over the shaped ceiling,
	// ShapedOfRaw the shaped ceiling over the raw one.
	ShapedCeilingRatio *float64 `json:"shaped_ceiling_ratio,omitempty"`
	ShapedOfRaw        *float64 `json:"shaped_ceiling_of_raw,omitempty"`
	ShapedCeiling      *Ceiling `json:"shaped_ceiling,omitempty"`
	// Transport is this side's QPs' transport counters, summed
	// (TransportCounters), over TransportQPs QPs.
	Transport    map[string]uint64 `json:"transport,omitempty"`
	TransportQPs int               `json:"transport_qps,omitempty"`
}

// JSONResult is one size in the --json document.
type JSONResult struct {
	Bytes      int     `json:"bytes"`
	Iterations int     `json:"iterations"`
	Messages   int     `json:"messages,omitempty"`
	Seconds    float64 `json:"seconds,omitempty"`
	// Bandwidth tests.
	BWPeakMBps   float64 `json:"bw_peak_mb_s,omitempty"`
	BWAvgMBps    float64 `json:"bw_avg_mb_s,omitempty"`
	BWAvgGbps    float64 `json:"bw_avg_gb_s,omitempty"`
	BytesPerSec  float64 `json:"bytes_per_s,omitempty"`
	MsgRateMpps  float64 `json:"msg_rate_mpps,omitempty"`
	TMinUs       float64 `json:"t_min_us,omitempty"`
	TMaxUs       float64 `json:"t_max_us,omitempty"`
	TTypicalUs   float64 `json:"t_typical_us,omitempty"`
	TAvgUs       float64 `json:"t_avg_us,omitempty"`
	TStdevUs     float64 `json:"t_stdev_us,omitempty"`
	P99Us        float64 `json:"p99_us,omitempty"`
	P999Us       float64 `json:"p99_9_us,omitempty"`
	LatencySides string  `json:"latency,omitempty"` // "one-way" (half the round trip) or "round-trip"
}

// ToJSON converts r to the --json document.
func ToJSON(r *Report) JSONReport {
	p := &r.Params
	j := JSONReport{Mode: p.Mode.String(), Role: "server", Conn: p.Conn.String(), Device: r.Device, QPs: p.QPs, MTU: r.MTU.Bytes(),
		GIDIndex: r.GIDIndex, TxDepth: p.TxDepth, Peer: r.RemoteVersion, DurationS: p.Duration.Seconds(),
		LocalQPNs: []int{}, RemoteQPNs: []int{}, Results: []JSONResult{}, ICRC: wire.CRCImplementation()}
	if r.Client {
		j.Role = "client"
	}
	j.Reversed = p.Reversed
	if p.Mode.atomic() {
		j.Atomic = p.Atomic.String()
	}
	if p.Mode.IsBW() {
		j.CQMod = p.CQMod
		j.Bidirectional = p.Duplex
	}
	for _, d := range r.Local {
		j.LocalQPNs = append(j.LocalQPNs, int(d.QPN))
	}
	for _, d := range r.Remote {
		j.RemoteQPNs = append(j.RemoteQPNs, int(d.QPN))
	}
	for _, res := range r.Results {
		if res.Passive {
			continue
		}
		j.Results = append(j.Results, toJSONResult(p.Mode, res))
	}
	if r.Ceiling != nil {
		v := r.CeilingRatio
		j.CeilingRatio, j.Ceiling = &v, r.Ceiling
	}
	if r.LinkCeiling != nil {
		v := r.LinkCeilingRatio
		j.LinkCeilingRatio, j.LinkCeiling = &v, r.LinkCeiling
	}
	if c := r.ShapedCeiling; c != nil {
		v := r.ShapedCeilingRatio
		j.ShapedCeilingRatio, j.ShapedCeiling = &v, c
		if o, ok := r.ShapedOfRaw(); ok {
			j.ShapedOfRaw = &o
		}
	}
	if r.TransportQPs > 0 {
		j.Transport, j.TransportQPs = map[string]uint64{}, r.TransportQPs
		for _, c := range r.TransportCounters() {
			j.Transport[c.Name] = c.Value
		}
	}
	return j
}

// Counter is one named transport counter of a Report.
type Counter struct {
	Name  string
	Value uint64
}

// TransportCounters lists r.Transport, in a fixed order, under the names
// goroce bench prints (--qp-counters, and "transport" in --json).
func (r *Report) TransportCounters() []Counter {
	s := &r.Transport
	return []Counter{
		{"tx_packets", s.TxPackets}, {"rx_packets", s.RxPackets},
		{"go_back_retries", s.TxRetransmits},
		{"local_ack_timeouts", s.RetryTimeouts}, {"spurious_timeouts", s.SpuriousTimeouts},
		{"seq_naks_sent", s.SeqNAKsSent}, {"seq_naks_received", s.SeqNAKsReceived},
		{"rnr_naks_sent", s.RNRNAKsSent}, {"rnr_naks_received", s.RNRNAKsReceived},
		{"other_naks_sent", s.NAKsSent}, {"implied_naks", s.ImpliedNAKs},
		{"duplicate_requests", s.RxDuplicateRequests}, {"duplicate_responses", s.RxDuplicateResponses},
		{"out_of_sequence", s.RxOutOfSequence}, {"dropped", s.RxDropped},
		{"completion_errors", s.CompletionErrors},
		{"qkey_mismatches", s.RxQKeyMismatch}, {"no_recv_wqe", s.RxNoRecvWQE},
	}
}

// PrintTransportCounters writes r's transport counters as one line (what
// --qp-counters prints on stderr after the run).
func PrintTransportCounters(w io.Writer, r *Report) {
	var b strings.Builder
	qps := "QPs"
	if r.TransportQPs == 1 {
		qps = "QP"
	}
	fmt.Fprintf(&b, "transport counters (%d %s):", r.TransportQPs, qps)
	for _, c := range r.TransportCounters() {
		fmt.Fprintf(&b, " %s=%d", c.Name, c.Value)
	}
	b.WriteByte('\n')
	io.WriteString(w, b.String())
}

func toJSONResult(m Mode, res Result) JSONResult {
	if m.IsBW() {
		b := res.BW
		return JSONResult{Bytes: b.Size, Iterations: b.Iters, Messages: b.Messages, Seconds: b.Duration.Seconds(),
			BWPeakMBps: b.PeakBytesPerSec / (1 << 20), BWAvgMBps: b.BytesPerSec / (1 << 20), BWAvgGbps: b.BytesPerSec * 8 / 1e9,
			BytesPerSec: b.BytesPerSec, MsgRateMpps: b.MsgPerSec / 1e6}
	}
	l := res.Lat
	us := func(d time.Duration) float64 { return float64(d) / 1e3 }
	sides := "one-way"
	if m.isRead() {
		sides = "round-trip"
	}
	return JSONResult{Bytes: l.Size, Iterations: l.Iters, TMinUs: us(l.Min), TMaxUs: us(l.Max), TTypicalUs: us(l.Typical),
		TAvgUs: us(l.Avg), TStdevUs: us(l.Stdev), P99Us: us(l.P99), P999Us: us(l.P999), LatencySides: sides}
}

// WriteJSON writes r as indented JSON.
func WriteJSON(w io.Writer, r *Report) error {
	e := json.NewEncoder(w)
	e.SetIndent("", "  ")
	return e.Encode(ToJSON(r))
}

// CSV columns.
var (
	csvBW  = []string{"mode", "bytes", "iterations", "qps", "bw_peak_mb_s", "bw_avg_mb_s", "msg_rate_mpps", "ceiling_ratio", "shaped_ceiling_ratio"}
	csvLat = []string{"mode", "bytes", "iterations", "t_min_us", "t_max_us", "t_typical_us", "t_avg_us", "t_stdev_us", "p99_us", "p99_9_us"}
)

// WriteCSV writes a header row and one row per size.
func WriteCSV(w io.Writer, r *Report) error {
	cw := csv.NewWriter(w)
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	j := ToJSON(r)
	if r.Params.Mode.IsBW() {
		cw.Write(csvBW)
		// The ceilings are measured once a run and compared with its best
		// size: empty when not measured.
		ratio, shaped := "", ""
		if j.CeilingRatio != nil {
			ratio = f(*j.CeilingRatio)
		}
		if j.ShapedCeilingRatio != nil {
			shaped = f(*j.ShapedCeilingRatio)
		}
		for _, x := range j.Results {
			cw.Write([]string{j.Mode, strconv.Itoa(x.Bytes), strconv.Itoa(x.Iterations), strconv.Itoa(j.QPs),
				f(x.BWPeakMBps), f(x.BWAvgMBps), f(x.MsgRateMpps), ratio, shaped})
		}
	} else {
		cw.Write(csvLat)
		for _, x := range j.Results {
			cw.Write([]string{j.Mode, strconv.Itoa(x.Bytes), strconv.Itoa(x.Iterations), f(x.TMinUs), f(x.TMaxUs),
				f(x.TTypicalUs), f(x.TAvgUs), f(x.TStdevUs), f(x.P99Us), f(x.P999Us)})
		}
	}
	cw.Flush()
	return cw.Error()
}
