package main

import (
	"bytes"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/concord-kv/concord/bench/internal/systems"
)

// A fresh system is not the system a user runs: a Concord cluster that has
// just elected its leaders still moves some of them for balance in its
// first seconds, and every fresh Pebble engine starts with 256 KiB
// memtables that double up to their 64 MiB size. The first 0.7 s row
// measured that (docs/benchmarks.md, "Redis protocol vs redis-server"). So,
// unless -warmup=false, each system first waits for its leaders to settle
// (Concord) and runs every test once at the largest -P, unmeasured, before
// its measured rows; every system gets the same warm-up.

// warmUp readies s for its measured rows (see above).
func warmUp(o options, s *systems.System) error {
	if s.Target == "concord" {
		if err := waitBalanced(o, s, 60*time.Second); err != nil {
			logf("%s: %v; measuring anyway", s.Name, err)
		}
	}
	p := slices.Max(o.pipelines)
	for _, t := range o.tests {
		args := benchArgs(o, s.RedisAddrs[0], t, p)
		cmd := exec.Command(benchmarkTool(o.peers), args...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("warm-up redis-benchmark %s: %v: %s", strings.Join(args, " "), err, lastLines(out.String()))
		}
	}
	logf("%s warmed up: %s at -P %d, %d requests each", s.Name, strings.Join(o.tests, ","), p, o.n)
	return nil
}

// waitBalanced polls `concord shard list` until every node of s leads a
// share of the shards that differs from every other node's by at most one
// (the placement service's start-up balancing is done), or timeout passes.
func waitBalanced(o options, s *systems.System, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last string
	for {
		var shards []shardRange
		if err := cliJSON(o.concord, s.Endpoints[0], &shards, "shard", "list"); err != nil {
			last = err.Error()
		} else if ok, desc := balanced(shards, len(s.Endpoints)); ok {
			return nil
		} else {
			last = desc
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("leaders not balanced after %v (%s)", timeout, last)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// balanced says whether nodes nodes lead all of shards, within one of each
// other, and describes the leaders per node.
func balanced(shards []shardRange, nodes int) (bool, string) {
	led := map[uint64]int{}
	for _, s := range shards {
		if s.Leader == 0 {
			return false, "a shard without a leader"
		}
		led[s.Leader]++
	}
	counts := make([]int, 0, nodes)
	for _, n := range led {
		counts = append(counts, n)
	}
	for len(counts) < nodes {
		counts = append(counts, 0)
	}
	slices.Sort(counts)
	desc := fmt.Sprintf("shards led per node, fewest first: %v", counts)
	return len(shards) > 0 && counts[len(counts)-1]-counts[0] <= 1, desc
}

// benchArgs is the redis-benchmark command line of one test at one -P
// against the Redis address addr.
func benchArgs(o options, addr, test string, p int) []string {
	host, port, _ := strings.Cut(addr, ":")
	args := []string{"-h", host, "-p", port, "-t", test, "-n", strconv.Itoa(o.n), "-c", strconv.Itoa(o.c),
		"-d", strconv.Itoa(o.d), "-P", strconv.Itoa(p), "-e", "--csv"}
	if o.r > 0 {
		args = append(args, "-r", strconv.Itoa(o.r))
	}
	return args
}
