package systems

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/concord-kv/concord/internal/bench"
	"github.com/concord-kv/concord/internal/localcluster"
)

// System is one store under test, started on 127.0.0.1 with its data in
// a temp dir.
type System struct {
	Name   string // as printed in the tables: concord, etcd, redis-everysec ...
	Target string // concord bench --target
	// Endpoints are the addresses Target dials; RedisAddrs the ones
	// redis-benchmark does (Concord's with Redis on, redis-server's).
	Endpoints  []string
	RedisAddrs []string
	procs      []*exec.Cmd           // etcd, Redis: their own processes
	lc         *localcluster.Cluster // Concord: its nodes
	dir        string
}

// PIDs lists the server processes (not the load generator).
func (s *System) PIDs() []int {
	var out []int
	for _, p := range s.procs {
		out = append(out, p.Process.Pid)
	}
	if s.lc != nil {
		for i := range s.lc.N() {
			if pid := s.lc.PID(i); pid > 0 {
				out = append(out, pid)
			}
		}
	}
	return out
}

// Stop signals every process the system started and waits for it; a
// process that has not exited after 10 s is killed. The data dir goes.
func (s *System) Stop() {
	if s.lc != nil {
		s.lc.Shutdown(10 * time.Second)
	}
	for _, p := range s.procs {
		_ = p.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range s.procs {
		done := make(chan struct{})
		go func() { _ = p.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-p.Process.Pid, syscall.SIGKILL)
			<-done
		}
	}
	s.procs = nil
	if s.dir != "" {
		_ = os.RemoveAll(s.dir)
	}
}

// start runs a process in its own process group (so stop reaches its
// children), with output to log.
func (s *System) start(log string, name string, args ...string) error {
	f, err := os.Create(log)
	if err != nil {
		return err
	}
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start %s: %w", name, err)
	}
	f.Close() // the child holds its own descriptor
	s.procs = append(s.procs, cmd)
	return nil
}

// waitReady polls the system with a put until one succeeds.
func (s *System) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		cfg := bench.Config{Target: s.Target, Endpoints: s.Endpoints}
		t, err := bench.Dial(ctx, cfg, 1)
		if err == nil {
			err = t.Put(ctx, []byte("compare-ready"), []byte("x"))
			t.Close()
		}
		cancel()
		if err == nil {
			return nil
		}
		last = err
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("%s not ready after %v: %v", s.Name, timeout, last)
}

// Start starts the system called name: "concord" (bin's nodes), "etcd",
// "redis-everysec" or "redis-always" (from the peers dir that
// bench/peers.sh fills), logs in logDir, and waits until it serves.
func Start(name, bin, peers, logDir string) (*System, error) {
	switch {
	case name == "concord":
		return StartConcord(bin, logDir)
	case name == "etcd":
		return StartEtcd(peers, logDir)
	case name == "redis-everysec" || name == "redis-always":
		return StartRedis(peers, logDir, strings.TrimPrefix(name, "redis-"))
	}
	return nil, fmt.Errorf("unknown system %q (want concord, etcd, redis-everysec or redis-always)", name)
}

// StartConcord starts a 3-node cluster, every node with a Redis port, and
// waits until every shard has a leader and node 1's Redis port takes a
// write.
func StartConcord(bin, logDir string) (*System, error) {
	dir, err := os.MkdirTemp("", "bench-concord-")
	if err != nil {
		return nil, err
	}
	s := &System{Name: "concord", Target: "concord", dir: dir}
	// The nodes as `concord cluster up --nodes 3` runs them (its default
	// shards and replicas), logs in logDir/concord/node1.log ...
	s.lc, err = localcluster.Start(localcluster.Config{Binary: bin, Dir: dir, Nodes: 3, Shards: 16, Replicas: 3,
		Redis: true, LogDir: filepath.Join(logDir, "concord")})
	if err == nil {
		s.Endpoints, s.RedisAddrs = s.lc.Addrs(), s.lc.RedisAddrs()
		_, err = s.lc.WaitReady(context.Background(), 60*time.Second)
	}
	if err == nil {
		err = s.waitReady(60 * time.Second)
	}
	if err == nil {
		err = (&System{Name: s.Name + " (Redis port)", Target: "redis", Endpoints: s.RedisAddrs[:1]}).waitReady(30 * time.Second)
	}
	if err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// StartEtcd starts a 3-member etcd cluster with the defaults of
// ../shared/research/peers-bench.md section 2 (fsync on, as always in etcd).
func StartEtcd(peers, logDir string) (*System, error) {
	dir, err := os.MkdirTemp("", "bench-etcd-")
	if err != nil {
		return nil, err
	}
	s := &System{Name: "etcd", Target: "etcd", dir: dir}
	ports, err := localcluster.FreePorts(6) // 3 client ports, then 3 peer ports
	if err != nil {
		return nil, err
	}
	var cluster []string
	for i := range 3 {
		cluster = append(cluster, fmt.Sprintf("m%d=http://127.0.0.1:%d", i, ports[3+i]))
	}
	for i := range 3 {
		client := fmt.Sprintf("http://127.0.0.1:%d", ports[i])
		peer := fmt.Sprintf("http://127.0.0.1:%d", ports[3+i])
		s.Endpoints = append(s.Endpoints, strings.TrimPrefix(client, "http://"))
		err = s.start(filepath.Join(logDir, fmt.Sprintf("etcd-m%d.log", i)), filepath.Join(peers, "etcd"),
			"--name", fmt.Sprintf("m%d", i), "--data-dir", filepath.Join(dir, fmt.Sprintf("m%d", i)),
			"--listen-client-urls", client, "--advertise-client-urls", client,
			"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
			"--initial-cluster", strings.Join(cluster, ","), "--initial-cluster-token", "concord-compare",
			"--initial-cluster-state", "new", "--log-level", "warn")
		if err != nil {
			s.Stop()
			return nil, err
		}
	}
	if err := s.waitReady(60 * time.Second); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// StartRedis starts one redis-server with the append-only file on and
// the given fsync policy (everysec or always), no RDB snapshots.
func StartRedis(peers, logDir, fsync string) (*System, error) {
	dir, err := os.MkdirTemp("", "bench-redis-")
	if err != nil {
		return nil, err
	}
	s := &System{Name: "redis-" + fsync, Target: "redis", dir: dir}
	port, err := localcluster.FreePort()
	if err != nil {
		return nil, err
	}
	s.Endpoints = []string{"127.0.0.1:" + strconv.Itoa(port)}
	s.RedisAddrs = s.Endpoints
	err = s.start(filepath.Join(logDir, s.Name+".log"), filepath.Join(peers, "redis-server"),
		"--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--dir", dir, "--save", "",
		"--appendonly", "yes", "--appendfsync", fsync, "--daemonize", "no", "--maxclients", "4000")
	if err == nil {
		err = s.waitReady(30 * time.Second)
	}
	if err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}
