//go:build !linux

package multiraft

import "time"

// monotonic returns the host's lease clock: Go's monotonic clock, which
// runs while the process is stopped and never jumps with the wall clock.
func monotonic() func() int64 {
	start := time.Now()
	return func() int64 { return int64(time.Since(start)) }
}
