package systems

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// clockTicks is USER_HZ, the unit of /proc/PID/stat's CPU times: 100 on
// every Linux this runs on (the kernel fixes it for user space).
const clockTicks = 100

// ProcCPU returns the user+system CPU time a process has used so far,
// from /proc/PID/stat (fields 14 and 15, counted after the command name,
// which may itself hold spaces and parentheses).
func ProcCPU(pid int) (time.Duration, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	return ParseStatCPU(string(b))
}

// ParseStatCPU reads the user+system time from the text of /proc/PID/stat.
func ParseStatCPU(stat string) (time.Duration, bool) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(stat[i+1:]) // f[0] is field 3 (state)
	if len(f) < 13 {
		return 0, false
	}
	utime, err1 := strconv.ParseUint(f[11], 10, 64)
	stime, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(utime+stime) * time.Second / clockTicks, true
}

// ServerMeter measures the CPU the servers' own processes use between
// start and stop: the figure least disturbed by the load generator and
// by neighbours on a shared box.
type ServerMeter struct {
	pids  []int
	start time.Duration
}

// StartServerCPU starts measuring the CPU of the processes pids.
func StartServerCPU(pids []int) *ServerMeter {
	return &ServerMeter{pids: pids, start: SumCPU(pids)}
}

// Stop returns the CPU time the processes used since StartServerCPU.
func (m *ServerMeter) Stop() time.Duration { return SumCPU(m.pids) - m.start }

// SumCPU is the CPU time the processes pids have used so far (0 for one
// that is gone).
func SumCPU(pids []int) time.Duration {
	var total time.Duration
	for _, p := range pids {
		d, _ := ProcCPU(p)
		total += d
	}
	return total
}

// ChildCPU is the CPU a finished command used (the load generator).
func ChildCPU(cmd *exec.Cmd) time.Duration {
	if cmd.ProcessState == nil {
		return 0
	}
	return cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
}

// PerKOps converts a CPU time over ops operations into CPU milliseconds
// per 1,000 operations (numerically: microseconds per operation).
func PerKOps(cpu time.Duration, ops float64) float64 {
	if ops <= 0 {
		return 0
	}
	return float64(cpu.Microseconds()) / ops
}
