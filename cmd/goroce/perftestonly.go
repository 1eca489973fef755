package main

import (
	"flag"
	"fmt"
	"strings"
)

// perftestOnly is a perftest flag goroce bench knows but does not
// implement: given, the run stops with a message naming it, rather than
// flag's "flag provided but not defined", which would suggest a typo.
type perftestOnly struct {
	name, what string
	boolean    bool
	given      *string // set to the flag's message when it is used
}

func (f *perftestOnly) String() string { return "" }

func (f *perftestOnly) Set(string) error {
	if *f.given == "" {
		*f.given = fmt.Sprintf("%s (perftest's %s) is not implemented by goroce bench", f.name, f.what)
	}
	return nil
}

func (f *perftestOnly) IsBoolFlag() bool { return f.boolean }

// perftestOnlyFlags are the perftest flags goroce bench refuses: names
// (short and long), whether it takes no value, and what it does in
// perftest.
var perftestOnlyFlags = []struct {
	names   []string
	boolean bool
	what    string
}{
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

// addPerftestOnly registers perftestOnlyFlags on fs; *given names the
// first one used.
func addPerftestOnly(fs *flag.FlagSet, given *string) {
	for _, f := range perftestOnlyFlags {
		for _, n := range f.names {
			dash := "--"
			if len(n) == 1 {
				dash = "-"
			}
			fs.Var(&perftestOnly{name: dash + n, what: f.what, boolean: f.boolean, given: given}, n,
				"perftest's "+f.what+": not implemented ("+strings.Join(f.names, ", ")+")")
		}
	}
}
