package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// cpuTimes are the machine's CPU times from the "cpu" line of /proc/stat,
// in clock ticks: busy (user, nice, system, irq, softirq, steal) and idle
// (idle, iowait).
type cpuTimes struct{ busy, idle uint64 }

// procStat is the file --cpu_util reads; a variable for the tests.
var procStat = "/proc/stat"

// readCPUTimes reads the aggregate "cpu" line of procStat.
func readCPUTimes() (cpuTimes, error) {
	f, err := os.Open(procStat)
	if err != nil {
		return cpuTimes{}, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		return cpuTimes{}, fmt.Errorf("%s: empty", procStat)
	}
	return parseCPULine(sc.Text())
}

// parseCPULine parses "cpu  user nice system idle iowait irq softirq steal
// ...": kernels before 2.6.11 stop after softirq or earlier; guest times,
// which user already includes, are ignored.
func parseCPULine(line string) (cpuTimes, error) {
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return cpuTimes{}, fmt.Errorf("%s: %q is not the aggregate cpu line", procStat, line)
	}
	var v [8]uint64
	for i := 1; i < len(f) && i <= len(v); i++ {
		n, err := strconv.ParseUint(f[i], 10, 64)
		if err != nil {
			return cpuTimes{}, fmt.Errorf("%s: field %d of the cpu line: %w", procStat, i, err)
		}
		v[i-1] = n
	}
	const user, nice, system, idle, iowait, irq, softirq, steal = 0, 1, 2, 3, 4, 5, 6, 7
	return cpuTimes{
		busy: v[user] + v[nice] + v[system] + v[irq] + v[softirq] + v[steal],
		idle: v[idle] + v[iowait],
	}, nil
}

// utilSince is the busy share of the CPU time from a to b, in percent (0
// when no tick passed).
func utilSince(a, b cpuTimes) float64 {
	busy, idle := b.busy-a.busy, b.idle-a.idle
	if b.busy < a.busy || b.idle < a.idle || busy+idle == 0 {
		return 0
	}
	return float64(busy) / float64(busy+idle) * 100
}

// cpuMeter measures --cpu_util from one mark to the next. perftest's
// counts user time only (its get_cpu_stats takes the first field);
// goroce's transport runs largely in system calls, so its busy time
// counts system, irq and softirq time too.
type cpuMeter struct {
	last cpuTimes
	err  error
}

// mark starts a measurement.
func (m *cpuMeter) mark() { m.last, m.err = readCPUTimes() }

// next returns the utilization since the last mark and starts the next
// measurement.
func (m *cpuMeter) next() (float64, error) {
	now, err := readCPUTimes()
	if err == nil {
		err = m.err
	}
	if err != nil {
		m.err = err
		return 0, errors.Join(errors.New("--cpu_util"), err)
	}
	u := utilSince(m.last, now)
	m.last = now
	return u, nil
}
