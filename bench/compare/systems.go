package main

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

// system is one store under test, started on 127.0.0.1 with its data in
// a temp dir.
type system struct {
	name      string // as printed in the table
	target    string // concord bench --target
	endpoints []string
	procs     []*exec.Cmd           // etcd, Redis: their own processes
	lc        *localcluster.Cluster // Concord: its nodes
	dir       string
}

// pids lists the server processes (not the load generator).
func (s *system) pids() []int {
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

// stop signals every process the system started and waits for it; a
// process that has not exited after 10 s is killed.
func (s *system) stop() {
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
func (s *system) start(log string, name string, args ...string) error {
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
func (s *system) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		cfg := bench.Config{Target: s.target, Endpoints: s.endpoints}
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
	return fmt.Errorf("%s not ready after %v: %v", s.name, timeout, last)
}

func startConcord(bin, logDir string) (*system, error) {
	dir, err := os.MkdirTemp("", "compare-concord-")
	if err != nil {
		return nil, err
	}
	s := &system{name: "concord", target: "concord", dir: dir}
	// The nodes as `concord cluster up --nodes 3` runs them (its default
	// shards and replicas), logs in logDir/concord/node1.log ...
	s.lc, err = localcluster.Start(localcluster.Config{Binary: bin, Dir: dir, Nodes: 3, Shards: 16, Replicas: 3,
		LogDir: filepath.Join(logDir, "concord")})
	if err == nil {
		s.endpoints = s.lc.Addrs()
		err = s.waitReady(60 * time.Second)
	}
	if err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

// startEtcd starts a 3-member etcd cluster with the defaults of
// ../shared/research/peers-bench.md section 2 (fsync on, as always in etcd).
func startEtcd(peers, logDir string) (*system, error) {
	dir, err := os.MkdirTemp("", "compare-etcd-")
	if err != nil {
		return nil, err
	}
	s := &system{name: "etcd", target: "etcd", dir: dir}
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
		s.endpoints = append(s.endpoints, strings.TrimPrefix(client, "http://"))
		err = s.start(filepath.Join(logDir, fmt.Sprintf("etcd-m%d.log", i)), filepath.Join(peers, "etcd"),
			"--name", fmt.Sprintf("m%d", i), "--data-dir", filepath.Join(dir, fmt.Sprintf("m%d", i)),
			"--listen-client-urls", client, "--advertise-client-urls", client,
			"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
			"--initial-cluster", strings.Join(cluster, ","), "--initial-cluster-token", "concord-compare",
			"--initial-cluster-state", "new", "--log-level", "warn")
		if err != nil {
			s.stop()
			return nil, err
		}
	}
	if err := s.waitReady(60 * time.Second); err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

// startRedis starts one redis-server with the append-only file on and
// the given fsync policy (everysec or always).
func startRedis(peers, logDir, fsync string) (*system, error) {
	dir, err := os.MkdirTemp("", "compare-redis-")
	if err != nil {
		return nil, err
	}
	s := &system{name: "redis-" + fsync, target: "redis", dir: dir}
	port, err := localcluster.FreePort()
	if err != nil {
		return nil, err
	}
	s.endpoints = []string{"127.0.0.1:" + strconv.Itoa(port)}
	err = s.start(filepath.Join(logDir, s.name+".log"), filepath.Join(peers, "redis-server"),
		"--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--dir", dir, "--save", "",
		"--appendonly", "yes", "--appendfsync", fsync, "--daemonize", "no", "--maxclients", "4000")
	if err == nil {
		err = s.waitReady(30 * time.Second)
	}
	if err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}
