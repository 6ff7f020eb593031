package testcluster

import (
	"time"
)

// ExpectExit marks node i's process as about to exit by itself (for example
// after an Admin Die call), so that its exit is not reported as unexpected,
// and returns a function that waits up to timeout for the exit. Call it
// before causing the exit.
func (c *Cluster) ExpectExit(i int) (wait func(timeout time.Duration)) {
	c.t.Helper()
	p, err := c.lc.ExpectExit(i)
	if err != nil {
		c.t.Fatalf("testcluster: %v", err)
	}
	return func(timeout time.Duration) {
		c.t.Helper()
		select {
		case <-p.Done():
		case <-time.After(timeout):
			c.t.Fatalf("testcluster: node %d did not exit within %v", i, timeout)
		}
		c.t.Logf("testcluster: node %d exited by itself (%v)", i, p.Err())
	}
}

// Pause stops node i's process with SIGSTOP: it keeps its sockets but
// answers nothing until Resume.
func (c *Cluster) Pause(i int) {
	c.t.Helper()
	if err := c.lc.Pause(i); err != nil {
		c.t.Fatalf("testcluster: %v", err)
	}
	c.t.Logf("testcluster: paused node %d (SIGSTOP)", i)
}

// Resume continues a paused node with SIGCONT.
func (c *Cluster) Resume(i int) {
	c.t.Helper()
	if err := c.lc.Resume(i); err != nil {
		c.t.Fatalf("testcluster: %v", err)
	}
	c.t.Logf("testcluster: resumed node %d (SIGCONT)", i)
}
