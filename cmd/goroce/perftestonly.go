package main

import (
	"flag"
	"fmt"
	"strings"
)

// perftestOnly is a flag of the real tool (perftest, or rdma-core's
// ibv_*_pingpong) that goroce knows but does not implement: given, the run
// stops with a message naming it, rather than flag's "flag provided but
// not defined", which would suggest a typo.
type perftestOnly struct {
	name, what string
	tool, cmd  string // "perftest", "goroce bench"
	boolean    bool
	given      *string // set to the flag's message when it is used
}

func (f *perftestOnly) String() string { return "" }

func (f *perftestOnly) Set(string) error {
	if *f.given == "" {
		*f.given = fmt.Sprintf("%s (%s's %s) is not implemented by %s", f.name, f.tool, f.what, f.cmd)
	}
	return nil
}

func (f *perftestOnly) IsBoolFlag() bool { return f.boolean }

// notImplFlag is one refused flag: its names (short and long), whether it
// takes no value, and what it does in the real tool.
type notImplFlag struct {
	names   []string
	boolean bool
	what    string
}

// perftestOnlyFlags are the perftest flags goroce bench refuses: names
// (short and long), whether it takes no value, and what it does in
// perftest.
var perftestOnlyFlags = []notImplFlag{
	{[]string{"R", "rdma_cm"}, true, "RDMA-CM connection setup; goroce bench connects through perftest's TCP exchange"},
	{[]string{"z", "com_rdma_cm"}, true, "exchange over RDMA-CM"},
	{[]string{"O", "dualport"}, true, "dual-port mode; goroce devices have one port"},
	{[]string{"g", "mcg"}, true, "multicast"},
	{[]string{"M", "MGID"}, false, "multicast group"},
	{[]string{"C", "report-cycles"}, true, "results in CPU cycles"},
	{[]string{"X", "vector"}, false, "completion vector"},
	{[]string{"W", "report-counters"}, false, "device counters"},
	{[]string{"L", "hop_limit"}, false, "hop limit, which perftest itself allows on RawEth QPs only"},
	{[]string{"report-per-port"}, true, "per-port results"},
	{[]string{"odp"}, true, "on-demand paging"},
	{[]string{"use_hugepages"}, true, "huge page buffers"},
	{[]string{"use_old_post_send"}, true, "legacy post send"},
	{[]string{"dont_xchg_versions"}, true, "exchange without versions"},
	{[]string{"mmap"}, false, "mmap'd buffers"},
	{[]string{"mmap-offset"}, false, "mmap'd buffers"},
	{[]string{"dlid"}, false, "a destination LID"},
	{[]string{"force-link"}, false, "link type override"},
	{[]string{"inline_recv"}, false, "inline receive"},
	{[]string{"latency_gap"}, false, "delay between latency posts"},
	{[]string{"retry_count"}, false, "RDMA-CM retry count"},
	{[]string{"wait_destroy"}, false, "delayed teardown"},
	{[]string{"typical_pkt_size"}, false, "rate limiter"},
}

// pingpongOnlyFlags are rdma-core's ibv_rc_pingpong flags goroce
// pingpong refuses, in the form of perftestOnlyFlags.
var pingpongOnlyFlags = []notImplFlag{
	{[]string{"o", "odp"}, true, "on-demand paging"},
	{[]string{"O", "iodp"}, true, "implicit on-demand paging"},
	{[]string{"P", "prefetch"}, true, "ODP prefetch"},
	{[]string{"t", "ts"}, true, "completion timestamps"},
	{[]string{"j", "dm"}, true, "device memory"},
	{[]string{"N", "new_send"}, true, "ibv_wr_* post send"},
}

// addPerftestOnly registers perftestOnlyFlags on fs; *given names the
// first one used.
func addPerftestOnly(fs *flag.FlagSet, given *string) {
	addNotImplemented(fs, perftestOnlyFlags, "perftest", "goroce bench", given)
}

// addPingpongOnly registers pingpongOnlyFlags on fs.
func addPingpongOnly(fs *flag.FlagSet, given *string) {
	addNotImplemented(fs, pingpongOnlyFlags, "ibv_rc_pingpong", "goroce pingpong", given)
}

func addNotImplemented(fs *flag.FlagSet, flags []notImplFlag, tool, cmd string, given *string) {
	for _, f := range flags {
		for _, n := range f.names {
			dash := "--"
			if len(n) == 1 {
				dash = "-"
			}
			fs.Var(&perftestOnly{name: dash + n, what: f.what, tool: tool, cmd: cmd, boolean: f.boolean, given: given}, n,
				tool+"'s "+f.what+": not implemented ("+strings.Join(f.names, ", ")+")")
		}
	}
}
