package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// cluster is one `concord cluster up` process (and, through it, its node
// processes) on free ports of 127.0.0.1, with its own temporary data dir.
type cluster struct {
	name               string
	nodes, replicas    int
	shards             int
	faults             bool
	addrs              []string
	nodePIDs           map[string]int // address -> node process id, from the banner
	dir                string         // temporary data dir, removed by stop
	logPath            string
	cmd                *exec.Cmd
	exited             chan struct{} // closed when cmd has been waited for
	waitErr            error
	stopOnce           sync.Once
	killedNodes        []string
	bootSec, readySec  float64 // process start to banner, and to all shards led
	bin                string
	startedAt, readyAt time.Time
}

// clusters started and not yet stopped, for the last-resort cleanup.
var (
	liveMu sync.Mutex
	live   = map[*cluster]bool{}
)

func stopAllClusters() {
	liveMu.Lock()
	cs := make([]*cluster, 0, len(live))
	for c := range live {
		cs = append(cs, c)
	}
	liveMu.Unlock()
	for _, c := range cs {
		c.stop()
	}
}

// freeBase finds n consecutive free TCP ports on 127.0.0.1 by binding each
// of them, starting at a random high port; the ports are released again
// just before the cluster binds them.
func freeBase(n int) (int, error) {
	for try := 0; try < 100; try++ {
		base := 20000 + rand.IntN(40000-n)
		var ls []net.Listener
		ok := true
		for i := 0; i < n; i++ {
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(base+i))
			if err != nil {
				ok = false
				break
			}
			ls = append(ls, l)
		}
		for _, l := range ls {
			_ = l.Close()
		}
		if ok {
			return base, nil
		}
	}
	return 0, errors.New("no free range of ports found")
}

var (
	bannerRE = regexp.MustCompile(`node \d+: (\S+) \(pid (\d+)\)`)
	exitedRE = regexp.MustCompile(`cluster: node \d+ \(pid \d+\) exited: [^\n]*`)
)

// startCluster starts a cluster and waits until it is ready; a cluster
// that fails to start (say, a port taken meanwhile) is stopped and tried
// again on other ports, three times in all.
func (d *driver) startCluster(ctx context.Context, name string, nodes, replicas int, faults bool) (*cluster, error) {
	var err error
	for try := 1; try <= 3; try++ {
		var c *cluster
		if c, err = d.tryCluster(ctx, name, nodes, replicas, faults); err == nil || ctx.Err() != nil {
			return c, err
		}
		d.logf("cluster %s: attempt %d failed: %v", name, try, err)
	}
	return nil, err
}

// tryCluster starts a cluster and waits until every node is up and has
// been heard from and every shard has a leader (polling `concord status`),
// or fails after a minute.
func (d *driver) tryCluster(ctx context.Context, name string, nodes, replicas int, faults bool) (*cluster, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "concord-seeds-")
	if err != nil {
		return nil, err
	}
	base, err := freeBase(nodes)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	c := &cluster{name: name, nodes: nodes, replicas: replicas, shards: 16, faults: faults, dir: dir, bin: d.bin,
		nodePIDs: map[string]int{}, exited: make(chan struct{}),
		logPath: filepath.Join(d.out, "logs", "cluster-"+name+".log")}
	for i := 0; i < nodes; i++ {
		c.addrs = append(c.addrs, "127.0.0.1:"+strconv.Itoa(base+i))
	}
	logf, err := os.Create(c.logPath)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	args := []string{"cluster", "up", "--nodes", strconv.Itoa(nodes), "--base-port", strconv.Itoa(base),
		"--data-dir", dir, "--replicas", strconv.Itoa(replicas), "--shards", strconv.Itoa(c.shards)}
	if faults {
		args = append(args, "--enable-fault-injection")
	}
	c.cmd = exec.Command(d.bin, args...)
	c.cmd.Stdout, c.cmd.Stderr = logf, logf
	// If this driver dies without cleaning up, the cluster process dies
	// too, and takes its nodes with it (they have the same setting).
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	c.startedAt = time.Now()
	if err := c.cmd.Start(); err != nil {
		_ = logf.Close()
		_ = os.RemoveAll(dir)
		return nil, err
	}
	liveMu.Lock()
	live[c] = true
	liveMu.Unlock()
	go func() {
		c.waitErr = c.cmd.Wait()
		_ = logf.Close()
		close(c.exited)
	}()
	d.logf("cluster %s: %d nodes, %d replicas/shard, %s (pid %d, data %s)", name, nodes, replicas,
		strings.Join(c.addrs, ","), c.cmd.Process.Pid, dir)
	if err := c.waitReady(ctx); err != nil {
		c.stop()
		return nil, fmt.Errorf("cluster %s: %w (log: %s)", name, err, c.logPath)
	}
	d.logf("cluster %s: ready in %.1fs", name, c.readySec)
	return c, nil
}

// statusJSON is the part of `concord status -o json` the driver reads.
type statusJSON struct {
	Nodes []struct {
		Node struct {
			Address string `json:"address"`
			State   string `json:"state"`
		} `json:"node"`
		HeartbeatAge float64 `json:"lastHeartbeatAgeSeconds"` // -1: never heard from
	} `json:"nodes"`
	Shards []struct {
		Shard struct {
			Replicas []json.RawMessage `json:"replicas"`
		} `json:"shard"`
		Leader json.RawMessage `json:"leaderNodeId"` // a uint64: protojson writes it quoted
	} `json:"shards"`
}

func (c *cluster) waitReady(ctx context.Context) error {
	deadline := time.Now().Add(60 * time.Second)
	last := "no answer yet"
	poll := time.NewTicker(250 * time.Millisecond)
	defer poll.Stop()
	for {
		select {
		case <-c.exited:
			return fmt.Errorf("cluster process exited before it was ready (%v)", c.waitErr)
		default:
		}
		if b, err := os.ReadFile(c.logPath); err == nil && exitedRE.Match(b) {
			return fmt.Errorf("a node exited: %s", exitedRE.Find(b))
		}
		if c.bootSec == 0 {
			if b, err := os.ReadFile(c.logPath); err == nil {
				ms := bannerRE.FindAllSubmatch(b, -1)
				if len(ms) >= c.nodes {
					for _, m := range ms {
						pid, _ := strconv.Atoi(string(m[2]))
						c.nodePIDs[string(m[1])] = pid
					}
					c.bootSec = time.Since(c.startedAt).Seconds()
				}
			}
		}
		if c.bootSec > 0 {
			if ok, why := c.ready(ctx); ok {
				c.readyAt = time.Now()
				c.readySec = c.readyAt.Sub(c.startedAt).Seconds()
				return nil
			} else {
				last = why
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after 60s: %s", last)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-c.exited:
		case <-poll.C:
		}
	}
}

// ready asks one status and checks that every node is up and every shard
// has a leader.
func (c *cluster) ready(ctx context.Context) (bool, string) {
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(sctx, c.bin, "status", "--endpoints", strings.Join(c.addrs, ","), "--timeout", "2s", "-o", "json")
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return false, strings.TrimSpace(errb.String() + " " + err.Error())
	}
	var st statusJSON
	if err := json.Unmarshal(out.Bytes(), &st); err != nil {
		return false, "status output: " + err.Error()
	}
	if len(st.Nodes) != c.nodes {
		return false, fmt.Sprintf("%d of %d nodes known", len(st.Nodes), c.nodes)
	}
	for _, n := range st.Nodes {
		if n.Node.State != "NODE_UP" {
			return false, n.Node.Address + " is " + n.Node.State
		}
		// Until every node has been heard from, requests can stall for
		// seconds although every shard already has a leader.
		if n.HeartbeatAge < 0 {
			return false, n.Node.Address + " not heard from yet"
		}
	}
	if len(st.Shards) == 0 {
		return false, "no shards yet"
	}
	led := 0
	for _, s := range st.Shards {
		l := strings.Trim(string(s.Leader), `"`)
		if l != "" && l != "0" {
			led++
		}
	}
	if led != len(st.Shards) {
		return false, fmt.Sprintf("%d of %d shards have a leader", led, len(st.Shards))
	}
	return true, ""
}

func (c *cluster) endpoints() string { return strings.Join(c.addrs, ",") }

// kill ends the node at addr at once (`concord fault die`, as after a power
// cut); if the fault API does not answer, the node's process gets SIGKILL.
func (c *cluster) kill(ctx context.Context, addr string) error {
	c.killedNodes = append(c.killedNodes, addr)
	kctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(kctx, c.bin, "fault", "die", addr).CombinedOutput()
	if err == nil {
		return nil
	}
	pid := c.nodePIDs[addr]
	if pid <= 0 {
		return fmt.Errorf("fault die %s: %v: %s (and no pid known)", addr, err, bytes.TrimSpace(out))
	}
	if kerr := syscall.Kill(pid, syscall.SIGKILL); kerr != nil && !errors.Is(kerr, syscall.ESRCH) {
		return fmt.Errorf("fault die %s: %v; kill -9 %d: %v", addr, err, pid, kerr)
	}
	return nil
}

// stop sends SIGTERM to the cluster process (which stops its nodes, then
// kills those still running after 10 s), SIGKILL after 20 s, then removes
// the data dir. Safe to call more than once.
func (c *cluster) stop() {
	c.stopOnce.Do(func() {
		if c.cmd.Process != nil {
			_ = c.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-c.exited:
			case <-time.After(20 * time.Second):
				_ = c.cmd.Process.Kill()
				<-c.exited
			}
		}
		// Nodes die with the cluster process (SIGKILL on its death); make
		// sure none of ours outlived it before removing its data.
		for _, pid := range c.nodePIDs {
			for i := 0; i < 100 && syscall.Kill(pid, 0) == nil && sameNode(pid, c.dir); i++ {
				time.Sleep(50 * time.Millisecond)
			}
			if syscall.Kill(pid, 0) == nil && sameNode(pid, c.dir) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		_ = os.RemoveAll(c.dir)
		liveMu.Lock()
		delete(live, c)
		liveMu.Unlock()
	})
}

// sameNode reports whether pid is still one of this cluster's nodes (its
// command line names the cluster's data dir), so a recycled pid is never
// signalled.
func sameNode(pid int, dir string) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && bytes.Contains(b, []byte(dir))
}

// cpuTicks reads the whole machine's busy and total CPU time from
// /proc/stat (clock ticks, summed over all CPUs); ok is false where there
// is no /proc.
func cpuTicks() (busy, total float64, ok bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, false
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return 0, 0, false
	}
	for i, s := range f[1:] {
		v, _ := strconv.ParseFloat(s, 64)
		if i >= 8 { // guest time is already counted in user
			break
		}
		total += v
		if i != 3 && i != 4 { // idle, iowait
			busy += v
		}
	}
	return busy, total, true
}

// procTicks is the user+system CPU time of pid in clock ticks.
func procTicks(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 {
		s = s[i+1:]
	}
	f := strings.Fields(s) // f[0] is field 3 (state); utime, stime are fields 14, 15
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return u + st
}

// serverTicks snapshots the CPU time of each node process.
func (c *cluster) serverTicks() map[int]float64 {
	m := map[int]float64{}
	for _, pid := range c.nodePIDs {
		m[pid] = procTicks(pid)
	}
	return m
}

// ticksSince sums what each node used since the snapshot; a node that
// exited in between counts 0.
func (c *cluster) ticksSince(before map[int]float64) float64 {
	var t float64
	for pid, b := range before {
		if a := procTicks(pid); a > b {
			t += a - b
		}
	}
	return t
}
