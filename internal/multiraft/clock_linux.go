package multiraft

import "golang.org/x/sys/unix"

// monotonic returns the host's lease clock: CLOCK_BOOTTIME, nanoseconds.
// Like Go's monotonic clock (CLOCK_MONOTONIC) it runs while the process is
// stopped (SIGSTOP) and never jumps with the wall clock; unlike it, it
// also runs while the whole machine is suspended, after which a leader
// must find its lease expired too.
func monotonic() func() int64 {
	return func() int64 {
		var ts unix.Timespec
		if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
			panic("multiraft: clock_gettime(CLOCK_BOOTTIME): " + err.Error()) // Linux ≥ 2.6.39 has it
		}
		return ts.Nano()
	}
}
