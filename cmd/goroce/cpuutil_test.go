package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

func TestParseCPULine(t *testing.T) {
	for _, c := range []struct {
		line string
		want cpuTimes
		bad  bool
	}{
		// user nice system idle iowait irq softirq steal guest guest_nice
		{line: "cpu  100 2 30 400 5 6 7 8 90 1", want: cpuTimes{busy: 100 + 2 + 30 + 6 + 7 + 8, idle: 405}},
		{line: "cpu 1 0 1 10", want: cpuTimes{busy: 2, idle: 10}},
		{line: "cpu0 1 2 3 4 5", bad: true},
		{line: "cpu 1 2 3", bad: true},
		{line: "cpu 1 x 3 4", bad: true},
		{line: "cpu 1 2 3 -4", bad: true},
		{line: "", bad: true},
	} {
		got, err := parseCPULine(c.line)
		if c.bad != (err != nil) || got != c.want {
			t.Errorf("parseCPULine(%q) = %+v, %v; want %+v, error %v", c.line, got, err, c.want, c.bad)
		}
	}
}

func TestUtilSince(t *testing.T) {
	a := cpuTimes{busy: 100, idle: 100}
	for _, c := range []struct {
		b    cpuTimes
		want float64
	}{
		{cpuTimes{busy: 175, idle: 125}, 75},
		{cpuTimes{busy: 100, idle: 200}, 0},
		{cpuTimes{busy: 300, idle: 100}, 100},
		{a, 0},                             // no tick
		{cpuTimes{busy: 50, idle: 300}, 0}, // a counter went back: not a figure
	} {
		if got := utilSince(a, c.b); got != c.want {
			t.Errorf("utilSince(%+v, %+v) = %v, want %v", a, c.b, got, c.want)
		}
	}
}

// cpuMeter reports a missing or unreadable /proc/stat instead of a figure.
func TestCPUMeterErrors(t *testing.T) {
	old := procStat
	defer func() { procStat = old }()
	procStat = filepath.Join(t.TempDir(), "stat")
	var m cpuMeter
	m.mark()
	if _, err := m.next(); err == nil || !strings.Contains(err.Error(), "--cpu_util") {
		t.Fatalf("no /proc/stat: error %v", err)
	}
	if err := os.WriteFile(procStat, []byte("intr 5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readCPUTimes(); err == nil {
		t.Fatal("a file without the cpu line read as CPU times")
	}
}

// --cpu_util adds perftest's column to a timed run, and without -D says
// what perftest says and runs without it.
func TestBenchCPUUtil(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for seconds")
	}
	var st, st2 int
	var out, errOut, out2, errOut2 string
	inNetNS(t, func() {
		st, out, errOut = runCLI("bench", "write_bw", "--loopback", "-D", "1", "--cpu_util")
		st2, out2, errOut2 = runCLI("bench", "send_lat", "--loopback", "-n", "100", "-F", "--cpu_util")
	})
	if st != exitOK || st2 != exitOK {
		t.Fatalf("status %d / %d\n%s\n%s\n%s\n%s", st, st2, out, errOut, out2, errOut2)
	}
	if !strings.Contains(out, "MsgRate[Mpps]    CPU_Util[%]\n") {
		t.Fatalf("no CPU_Util[%%] column:\n%s", out)
	}
	m := regexp.MustCompile(`(?m)^ 65536 .*\t    ([0-9.]+)$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no result line with a CPU utilization:\n%s", out)
	}
	// A loopback run keeps a core busy: never 0, never above 100.
	if u, _ := strconv.ParseFloat(m[1], 64); !(u > 0 && u <= 100) {
		t.Fatalf("CPU utilization %q", m[1])
	}
	if !strings.Contains(errOut2, " CPU Utilization works only with Duration mode.") || strings.Contains(out2, "CPU_Util") {
		t.Fatalf("without -D: stdout\n%s\nstderr\n%s", out2, errOut2)
	}
}
