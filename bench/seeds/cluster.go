package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/concord-kv/concord/internal/localcluster"
)

// cluster is a set of node processes on free ports of 127.0.0.1, run by
// localcluster (as `concord cluster up` runs them), with its own temporary
// data dir.
type cluster struct {
	name            string
	nodes, replicas int
	shards          int
	addrs           []string
	lc              *localcluster.Cluster
	dir             string // temporary data dir, removed by stop
	logDir          string // the nodes' logs, node1.log ...
	stopOnce        sync.Once
	readySec        float64 // start to all nodes heard from and all shards led
	bin             string
	startedAt       time.Time
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
	c := &cluster{name: name, nodes: nodes, replicas: replicas, shards: 16, dir: dir, bin: d.bin,
		logDir: filepath.Join(d.out, "logs", "cluster-"+name)}
	_ = os.RemoveAll(c.logDir) // an earlier attempt's logs must not pass for this one's
	c.startedAt = time.Now()
	c.lc, err = localcluster.Start(localcluster.Config{Binary: d.bin, Dir: dir, LogDir: c.logDir, Nodes: nodes,
		Shards: c.shards, Replicas: replicas, FaultInjection: faults})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	c.addrs = c.lc.Addrs()
	liveMu.Lock()
	live[c] = true
	liveMu.Unlock()
	d.logf("cluster %s: %d nodes, %d replicas/shard, %s (data %s)", name, nodes, replicas, c.endpoints(), dir)
	if err := c.waitReady(ctx); err != nil {
		c.stop()
		return nil, fmt.Errorf("cluster %s: %w (logs: %s)", name, err, c.logDir)
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

// waitReady polls ready for a minute; a node that exits meanwhile ends
// the wait at once.
func (c *cluster) waitReady(ctx context.Context) error {
	_, err := localcluster.WaitFor(ctx, 60*time.Second, func() error {
		if err := c.lc.Exited(); err != nil {
			return localcluster.Permanent(err)
		}
		return c.ready(ctx)
	})
	if err == nil {
		c.readySec = time.Since(c.startedAt).Seconds()
	}
	return err
}

// ready asks one status and checks that every node is up and every shard
// has a leader.
func (c *cluster) ready(ctx context.Context) error {
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(sctx, c.bin, "status", "--endpoints", c.endpoints(), "--timeout", "2s", "-o", "json")
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return errors.New(strings.TrimSpace(errb.String() + " " + err.Error()))
	}
	var st statusJSON
	if err := json.Unmarshal(out.Bytes(), &st); err != nil {
		return fmt.Errorf("status output: %w", err)
	}
	if len(st.Nodes) != c.nodes {
		return fmt.Errorf("%d of %d nodes known", len(st.Nodes), c.nodes)
	}
	for _, n := range st.Nodes {
		if n.Node.State != "NODE_UP" {
			return errors.New(n.Node.Address + " is " + n.Node.State)
		}
		// Until every node has been heard from, requests can stall for
		// seconds although every shard already has a leader.
		if n.HeartbeatAge < 0 {
			return errors.New(n.Node.Address + " not heard from yet")
		}
	}
	if len(st.Shards) == 0 {
		return errors.New("no shards yet")
	}
	led := 0
	for _, s := range st.Shards {
		l := strings.Trim(string(s.Leader), `"`)
		if l != "" && l != "0" {
			led++
		}
	}
	if led != len(st.Shards) {
		return fmt.Errorf("%d of %d shards have a leader", led, len(st.Shards))
	}
	return nil
}

func (c *cluster) endpoints() string { return strings.Join(c.addrs, ",") }

// kill ends the node at addr at once (`concord fault die`, as after a power
// cut); if the fault API does not answer, the node's process gets SIGKILL.
func (c *cluster) kill(ctx context.Context, addr string) error {
	i := c.lc.Index(addr)
	if i < 0 {
		return fmt.Errorf("kill %s: not a node of cluster %s", addr, c.name)
	}
	if _, err := c.lc.ExpectExit(i); err != nil {
		return err
	}
	kctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(kctx, c.bin, "fault", "die", addr).CombinedOutput()
	if err == nil {
		return nil
	}
	if kerr := c.lc.Kill(i); kerr != nil && !errors.Is(kerr, localcluster.ErrNotRunning) {
		return fmt.Errorf("fault die %s: %v: %s; %v", addr, err, bytes.TrimSpace(out), kerr)
	}
	return nil
}

// stop stops the nodes (SIGTERM, SIGKILL after 10 s, as `cluster up`
// does on Ctrl-C), then removes the data dir. Safe to call more than once.
func (c *cluster) stop() {
	c.stopOnce.Do(func() {
		c.lc.Shutdown(10 * time.Second)
		_ = os.RemoveAll(c.dir)
		liveMu.Lock()
		delete(live, c)
		liveMu.Unlock()
	})
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
	for i := range c.nodes {
		if pid := c.lc.PID(i); pid != 0 {
			m[pid] = procTicks(pid)
		}
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
