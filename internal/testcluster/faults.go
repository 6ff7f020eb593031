package testcluster

import (
	"syscall"
	"time"
)

// ExpectExit marks node i's process as about to exit by itself (for example
// after an Admin Die call), so that its exit is not reported as unexpected,
// and returns a function that waits up to timeout for the exit and detaches
// the process. Call it before causing the exit.
func (c *Cluster) ExpectExit(i int) (wait func(timeout time.Duration)) {
	c.t.Helper()
	p := c.proc(i)
	if p == nil {
		c.t.Fatalf("testcluster: ExpectExit(%d): node is not running", i)
	}
	p.expected.Store(true)
	return func(timeout time.Duration) {
		c.t.Helper()
		select {
		case <-p.done:
		case <-time.After(timeout):
			c.t.Fatalf("testcluster: node %d did not exit within %v", i, timeout)
		}
		c.mu.Lock()
		if c.nodes[i].proc == p {
			c.nodes[i].proc = nil
		}
		c.mu.Unlock()
		c.t.Logf("testcluster: node %d exited by itself (%v)", i, p.err)
	}
}

// Pause stops node i's process with SIGSTOP: it keeps its sockets but
// answers nothing until Resume.
func (c *Cluster) Pause(i int) {
	c.t.Helper()
	c.signal(i, syscall.SIGSTOP)
	c.t.Logf("testcluster: paused node %d (SIGSTOP)", i)
}

// Resume continues a paused node with SIGCONT.
func (c *Cluster) Resume(i int) {
	c.t.Helper()
	c.signal(i, syscall.SIGCONT)
	c.t.Logf("testcluster: resumed node %d (SIGCONT)", i)
}

func (c *Cluster) signal(i int, sig syscall.Signal) {
	c.t.Helper()
	p := c.proc(i)
	if p == nil {
		c.t.Fatalf("testcluster: signal %v to node %d: not running", sig, i)
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		c.t.Fatalf("testcluster: signal %v to node %d: %v", sig, i, err)
	}
}
