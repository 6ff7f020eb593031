package localcluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync/atomic"
	"syscall"
	"time"
)

// Process is one run of a node: from its start to its exit.
type Process struct {
	cmd   *exec.Cmd
	done  chan struct{} // closed when the process has exited and been reaped
	err   error         // the exit error, valid once done is closed
	asked atomic.Bool   // its owner asked it to exit (Stop, Kill, ExpectExit, ...)
}

// PID is the process id.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Done is closed once the process has exited and been reaped.
func (p *Process) Done() <-chan struct{} { return p.done }

// Err is the process's exit error (nil for exit status 0); valid once Done
// is closed.
func (p *Process) Err() error { return p.err }

// Running reports whether the process has not exited yet.
func (p *Process) Running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Process is node i's latest process, running or not; nil if node i was
// never started.
func (c *Cluster) Process(i int) *Process {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.procs[i]
}

// Running reports whether node i's process is running.
func (c *Cluster) Running(i int) bool {
	p := c.Process(i)
	return p != nil && p.Running()
}

// PID is the process id of node i, or 0 if it is not running.
func (c *Cluster) PID(i int) int {
	if p := c.Process(i); p != nil && p.Running() {
		return p.PID()
	}
	return 0
}

// Exited returns an error naming every node whose latest process exited
// without being asked to, or nil.
func (c *Cluster) Exited() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for i, p := range c.procs {
		if p != nil && !p.Running() && !p.asked.Load() {
			errs = append(errs, fmt.Errorf("node %d (%s, pid %d) exited by itself: %v", i, c.Addr(i), p.PID(), exitDesc(p.err)))
		}
	}
	return errors.Join(errs...)
}

func exitDesc(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

// watch reaps node i's process p, reports its exit, and restarts the node
// when supervising and the exit was not asked for.
func (c *Cluster) watch(i int, p *Process) {
	defer c.watchers.Done()
	p.err = p.cmd.Wait()
	close(p.done)
	asked := p.asked.Load()
	if c.cfg.OnExit != nil {
		c.cfg.OnExit(Exit{Node: i, PID: p.PID(), Err: p.err, Asked: asked})
	}
	if c.cfg.Supervise && !asked {
		c.restart(i, p)
	}
}

// restart starts node i again after RestartDelay, and keeps trying, as
// long as nobody else has started it and the cluster is not shut down.
func (c *Cluster) restart(i int, old *Process) {
	delay := c.cfg.RestartDelay
	for {
		select {
		case <-c.stopping:
			return
		case <-time.After(delay):
		}
		c.mu.Lock()
		if c.procs[i] != old {
			c.mu.Unlock()
			return
		}
		err := c.startLocked(i)
		p := c.procs[i]
		c.mu.Unlock()
		if err == nil {
			if c.cfg.OnRestart != nil {
				c.cfg.OnRestart(i, p.PID())
			}
			return
		}
		if errors.Is(err, ErrShutdown) {
			return
		}
		delay = max(delay, 100*time.Millisecond) // a start that fails at once must not spin
	}
}

// ask marks node i's running process as asked to exit and returns it.
func (c *Cluster) ask(i int) (*Process, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.procs[i]
	if p == nil || !p.Running() {
		return nil, ErrNotRunning
	}
	p.asked.Store(true)
	return p, nil
}

// Stop stops node i gracefully: SIGTERM, then SIGKILL if it has not exited
// within Config.StopTimeout. It waits for the exit, and returns an error if
// the node had to be killed or did not exit cleanly.
func (c *Cluster) Stop(i int) error {
	p, err := c.ask(i)
	if err != nil {
		return fmt.Errorf("stop node %d: %w", i, err)
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(c.cfg.StopTimeout):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("node %d did not exit within %v of SIGTERM; killed it", i, c.cfg.StopTimeout)
	}
	if p.err != nil {
		return fmt.Errorf("node %d exited with %v after SIGTERM (want a clean exit)", i, p.err)
	}
	return nil
}

// Kill kills node i with SIGKILL and waits for it to exit.
func (c *Cluster) Kill(i int) error {
	p, err := c.ask(i)
	if err != nil {
		return fmt.Errorf("kill node %d: %w", i, err)
	}
	_ = p.cmd.Process.Kill()
	<-p.done
	return nil
}

// KillAll SIGKILLs every running node at once, waits for them all, and
// returns how many there were.
func (c *Cluster) KillAll() int {
	var ps []*Process
	for i := range c.N() {
		if p, err := c.ask(i); err == nil {
			ps = append(ps, p)
		}
	}
	terminate(ps, 0)
	return len(ps)
}

// ExpectExit marks node i's running process as about to exit by itself
// (say, after `concord fault die`), so that its exit counts as asked for,
// and returns it to wait on. Call it before causing the exit.
func (c *Cluster) ExpectExit(i int) (*Process, error) {
	p, err := c.ask(i)
	if err != nil {
		return nil, fmt.Errorf("expect exit of node %d: %w", i, err)
	}
	return p, nil
}

// Pause stops node i's process with SIGSTOP: it keeps its sockets but
// answers nothing until Resume.
func (c *Cluster) Pause(i int) error { return c.signal(i, syscall.SIGSTOP) }

// Resume continues a paused node with SIGCONT.
func (c *Cluster) Resume(i int) error { return c.signal(i, syscall.SIGCONT) }

func (c *Cluster) signal(i int, sig syscall.Signal) error {
	p := c.Process(i)
	if p == nil || !p.Running() {
		return fmt.Errorf("signal %v to node %d: %w", sig, i, ErrNotRunning)
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("signal %v to node %d: %w", sig, i, err)
	}
	return nil
}

// Wipe deletes node i's data dir; the node must not be running.
func (c *Cluster) Wipe(i int) error {
	if c.Running(i) {
		return fmt.Errorf("wipe node %d: %w", i, ErrRunning)
	}
	if err := os.RemoveAll(c.DataDir(i)); err != nil {
		return fmt.Errorf("wipe node %d: %w", i, err)
	}
	return nil
}

// Shutdown ends supervision, stops every running node (SIGTERM, and
// SIGKILL for those still running after grace; at once when grace is 0),
// waits for all of them, and closes the connections of Conn. It leaves
// the data dirs and logs; the cluster starts nothing afterwards. Safe to
// call more than once.
func (c *Cluster) Shutdown(grace time.Duration) {
	c.mu.Lock()
	if !c.shutdown {
		c.shutdown = true
		close(c.stopping)
	}
	var ps []*Process
	for _, p := range c.procs {
		if p != nil && p.Running() {
			p.asked.Store(true)
			ps = append(ps, p)
		}
	}
	conns := c.conns
	c.conns = nil
	c.mu.Unlock()
	for _, conn := range conns {
		conn.Close()
	}
	terminate(ps, grace)
	c.watchers.Wait()
}

// terminate signals every process (SIGTERM with a grace period, else
// SIGKILL), kills those still running when grace runs out, and waits for
// them all.
func terminate(ps []*Process, grace time.Duration) {
	sig := syscall.SIGKILL
	if grace > 0 {
		sig = syscall.SIGTERM
	}
	for _, p := range ps {
		_ = p.cmd.Process.Signal(sig)
	}
	timer := time.NewTimer(grace)
	defer timer.Stop()
	expired := false
	for _, p := range ps {
		if !expired {
			select {
			case <-p.done:
				continue
			case <-timer.C:
				expired = true
			}
		}
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}
