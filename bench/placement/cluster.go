package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/localcluster"
)

// cluster is one local cluster of `concord server` processes
// (internal/localcluster) on free ports, with its data in a temporary dir
// that stop removes.
type cluster struct {
	name     string
	bin      string
	lc       *localcluster.Cluster
	dir      string // temporary data dir
	replicas int
	stopOnce sync.Once
}

// live holds the clusters not yet stopped, for the cleanup on error or
// Ctrl-C.
var (
	liveMu sync.Mutex
	live   = map[*cluster]bool{}
)

func stopAll() {
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

// startCluster starts nodes nodes with 3 replicas per shard, HTTP on (for
// /metrics) and the value size limit raised to maxValue, and waits until
// every shard has a leader.
func (d *driver) startCluster(ctx context.Context, name string, nodes int) (*cluster, error) {
	dir, err := os.MkdirTemp("", "concord-placement-")
	if err != nil {
		return nil, err
	}
	logDir := filepath.Join(d.logDir, name)
	_ = os.RemoveAll(logDir)
	lc, err := localcluster.Start(localcluster.Config{Binary: d.bin, Dir: dir, LogDir: logDir, Nodes: nodes,
		Replicas: d.p.replicas, HTTP: true, FaultInjection: true,
		ExtraArgs: []string{"--max-value-bytes", strconv.Itoa(d.p.maxValueBytes)}})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	c := &cluster{name: name, bin: d.bin, lc: lc, dir: dir, replicas: d.p.replicas}
	liveMu.Lock()
	live[c] = true
	liveMu.Unlock()
	d.logf("cluster %s: %d nodes %s, data in %s, logs in %s", name, nodes, strings.Join(lc.Addrs(), ","), dir, logDir)
	if _, err := lc.WaitReady(ctx, 90*time.Second); err != nil {
		c.stop()
		return nil, fmt.Errorf("cluster %s: %w", name, err)
	}
	return c, nil
}

// stop kills every node by PID (SIGTERM, SIGKILL after 10 s) and removes
// the data dir. Safe to call more than once.
func (c *cluster) stop() {
	c.stopOnce.Do(func() {
		c.lc.Shutdown(10 * time.Second)
		_ = os.RemoveAll(c.dir)
		liveMu.Lock()
		delete(live, c)
		liveMu.Unlock()
	})
}

// statusVia is the running node the driver asks for status: the lowest
// index that runs (status is answered by the placement leader, whichever
// node is asked).
func (c *cluster) statusVia() int {
	for i := range c.lc.N() {
		if c.lc.Running(i) {
			return i
		}
	}
	return 0
}

// status asks one running node for the cluster status (the RPC behind
// `concord status`, `node list` and `shard list`).
func (c *cluster) status(ctx context.Context) (view, error) {
	conn, err := c.lc.Conn(c.statusVia())
	if err != nil {
		return view{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	st, err := concordpb.NewClusterClient(conn).Status(ctx, &concordpb.StatusRequest{})
	if err != nil {
		return view{}, err
	}
	return viewOf(st), nil
}

// poll calls cond on a fresh status every interval until it returns true
// or an error, a node exits unasked, or timeout passes. Status errors are
// retried.
func (c *cluster) poll(ctx context.Context, interval, timeout time.Duration, cond func(view) (bool, error)) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		if err := c.lc.Exited(); err != nil {
			return err
		}
		v, err := c.status(ctx)
		if err == nil {
			done, cerr := cond(v)
			if done || cerr != nil {
				return cerr
			}
		} else {
			last = err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not reached within %v (last status error: %v)", timeout, last)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
}

// balanceTimes is what waitBalanced saw, each since start; zero when not
// reached. leadersMissed is set when the leader counts were still not
// within one of the mean p.leaderWait after the replicas were.
type balanceTimes struct {
	shaped, replicas, full time.Duration
	leadersMissed          string
	last                   verdict
}

// waitBalanced polls until the cluster has want UP nodes and is balanced
// (verdict.balanced), noting when the shape, the replica counts (with the
// shape) and everything first held. The shape and replica balance must
// come within p.balanceTimeout; leader balance is given p.leaderWait more,
// and its absence is recorded, not an error, so that the run goes on.
func (c *cluster) waitBalanced(ctx context.Context, start time.Time, want int, p params) (balanceTimes, error) {
	var bt balanceTimes
	var lastView view
	errLeaders := errors.New("leaders not balanced in time")
	err := c.poll(ctx, p.poll, p.balanceTimeout+p.leaderWait, func(v view) (bool, error) {
		d := v.check(want, c.replicas, p.metaReplicas)
		bt.last, lastView = d, v
		now := time.Since(start)
		if d.shaped && bt.shaped == 0 {
			bt.shaped = now
		}
		if d.shaped && d.replicas && bt.replicas == 0 {
			bt.replicas = now
		}
		switch {
		case d.balanced():
			bt.full = now
			return true, nil
		case bt.replicas == 0 && now > p.balanceTimeout:
			return false, fmt.Errorf("not reached within %v", p.balanceTimeout)
		case bt.replicas != 0 && d.shaped && d.replicas && now > bt.replicas+p.leaderWait:
			return false, errLeaders
		}
		return false, nil
	})
	if errors.Is(err, errLeaders) {
		bt.leadersMissed = fmt.Sprintf("leader counts not within one of the mean %v after the replica counts were: %s; %s",
			p.leaderWait, bt.last.why, lastView.transferOptions())
		return bt, nil
	}
	if err != nil {
		return bt, fmt.Errorf("cluster %s: not balanced at %d nodes: %w (last verdict: %s)", c.name, want, err, bt.last.why)
	}
	return bt, nil
}

// join lays out a new node that joins through node 0 and starts it; it
// returns the node's index and when its process started.
func (c *cluster) join() (int, time.Time, error) {
	i, err := c.lc.AddJoiner([]int{0})
	if err != nil {
		return 0, time.Time{}, err
	}
	start := time.Now()
	return i, start, c.lc.Start(i)
}

// remove runs `concord node remove ID` for the node at index i, whose
// process stops itself once it is removed.
func (c *cluster) remove(ctx context.Context, i int) (time.Time, error) {
	v, err := c.status(ctx)
	if err != nil {
		return time.Time{}, err
	}
	id, _, ok := v.nodeByAddr(c.lc.Addr(i))
	if !ok {
		return time.Time{}, fmt.Errorf("no node at %s", c.lc.Addr(i))
	}
	if _, err := c.lc.ExpectExit(i); err != nil {
		return time.Time{}, err
	}
	start := time.Now()
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(cctx, c.bin, "node", "remove", strconv.FormatUint(id, 10),
		"--endpoints", c.lc.Addr(c.statusVia())).CombinedOutput()
	if err != nil {
		return start, fmt.Errorf("concord node remove %d: %v: %s", id, err, strings.TrimSpace(string(out)))
	}
	return start, nil
}

// metrics reads node i's /metrics and returns concord_shard_applied_index
// per shard and concord_snapshot_bytes_total{direction="received"}.
func (c *cluster) metrics(ctx context.Context, i int) (applied map[uint64]uint64, snapRecv float64, err error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+c.lc.HTTPAddr(i)+"/metrics", nil)
	if err != nil {
		return nil, 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, 0, errors.New(resp.Status)
	}
	applied = map[uint64]uint64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, `concord_shard_applied_index{shard="`); ok {
			shard, val, ok := strings.Cut(rest, `"} `)
			s, err1 := strconv.ParseUint(shard, 10, 64)
			f, err2 := strconv.ParseFloat(val, 64)
			if ok && err1 == nil && err2 == nil {
				applied[s] = uint64(f)
			}
		} else if rest, ok := strings.CutPrefix(line, `concord_snapshot_bytes_total{direction="received"} `); ok {
			snapRecv, _ = strconv.ParseFloat(rest, 64)
		}
	}
	return applied, snapRecv, sc.Err()
}
