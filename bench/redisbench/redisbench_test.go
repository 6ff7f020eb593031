package main

import (
	"strings"
	"testing"
)

func TestSplitErrors(t *testing.T) {
	out := `"test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
Error from server: UNAVAILABLE no leader known
"SET","3602.31","0.274","0.096","0.247","0.399","0.575","198.655"
Error from server: ERR other
`
	csv, errs := splitErrors(out)
	if strings.Contains(csv, "Error") || !strings.Contains(csv, `"SET"`) {
		t.Errorf("csv kept %q", csv)
	}
	if !strings.Contains(errs, "UNAVAILABLE no leader known") || !strings.Contains(errs, "2 lines") {
		t.Errorf("errors %q", errs)
	}
	if _, errs := splitErrors(`"SET","1"`); errs != "" {
		t.Errorf("errors %q from clean output", errs)
	}
}

func TestSameTest(t *testing.T) {
	if !sameTest("MSET (10 keys)", "mset") || !sameTest("SET", "set") || sameTest("MSET (10 keys)", "set") {
		t.Error("sameTest matched wrongly")
	}
}

func TestTableRatiosAndGoal(t *testing.T) {
	o := options{n: 100, c: 5, d: 8, tests: []string{"set"}, pipelines: []int{1, 16},
		systems: []string{"concord", "redis-everysec"}}
	rs := []result{
		{System: "concord", Test: "SET", Pipeline: 1, RPS: 100, ServerCPU: 50},
		{System: "concord", Test: "SET", Pipeline: 16, RPS: 600},
		{System: "redis-everysec", Test: "SET", Pipeline: 1, RPS: 400},
		{System: "redis-everysec", Test: "SET", Pipeline: 16, RPS: 1000},
	}
	table := formatTable(rs, o, runInfo{})
	for _, want := range []string{"| concord | SET | 1 | 100 | 0.000 | 50.0 | 0.25× |", "| concord | SET | 16 | 600 |", "0.60× |",
		`"pipelined SET ≥ 50 % of Redis everysec": met (SET -P 16: Concord 600 requests/s, 60.0 %`} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
	rs[1].RPS = 499
	if g := goal(rs); !strings.Contains(g, "not met") {
		t.Errorf("goal with 49.9 %%: %q", g)
	}
	if g := goal(rs[:2]); g != "" {
		t.Errorf("goal without redis-everysec: %q", g)
	}
}

// TestLeaderVia protects the table's (via leader)/(forwarded) marks: the
// shard is found by its inclusive hash range, its leader by node id, and
// node 1 by its address; an unknown leader or node says nothing.
func TestLeaderVia(t *testing.T) {
	shards := []shardRange{{StartHash: 0, EndHash: 99, Leader: 2}, {StartHash: 100, EndHash: 199, Leader: 1}, {StartHash: 200, EndHash: 299}}
	nodes := []nodeAddr{{1, "127.0.0.1:1"}, {2, "127.0.0.1:2"}}
	for _, c := range []struct {
		h    uint64
		want string
	}{{0, "forwarded"}, {99, "forwarded"}, {100, "leader"}, {199, "leader"}, {250, ""}, {300, ""}} {
		if got := leaderVia(c.h, shards, nodes, "127.0.0.1:1"); got != c.want {
			t.Errorf("hash %d: %q, want %q", c.h, got, c.want)
		}
	}
	if got := leaderVia(150, shards, nodes[1:], "127.0.0.1:1"); got != "" {
		t.Errorf("leader not among the nodes: %q, want none", got)
	}
	if oneKey("incr") != "counter:__rand_int__" || oneKey("mset") != "key:__rand_int__" {
		t.Error("oneKey: not redis-benchmark's keys")
	}
	o := options{tests: []string{"set"}, pipelines: []int{16}, systems: []string{"concord"}}
	table := formatTable([]result{{System: "concord", Test: "SET", Pipeline: 16, RPS: 600, Via: "forwarded"}}, o, runInfo{})
	if !strings.Contains(table, "| concord (forwarded) | SET | 16 | 600 |") {
		t.Errorf("table lacks the via mark:\n%s", table)
	}
}

// TestBalanced checks the warm-up's wait for the start-up leader moves:
// done only when every node leads a share within one of every other's.
func TestBalanced(t *testing.T) {
	lead := func(ls ...uint64) []shardRange {
		var s []shardRange
		for _, l := range ls {
			s = append(s, shardRange{Leader: l})
		}
		return s
	}
	for _, c := range []struct {
		name   string
		shards []shardRange
		want   bool
	}{
		{"6-5-5", lead(1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3), true},
		{"fresh: one node leads most", lead(1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3), false},
		{"a node leads none", lead(1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2), false},
		{"a shard without a leader", lead(1, 1, 1, 1, 1, 0, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3), false},
		{"no shards", nil, false},
	} {
		if got, desc := balanced(c.shards, 3); got != c.want {
			t.Errorf("%s: balanced = %v (%s), want %v", c.name, got, desc, c.want)
		}
	}
}

// TestBothPaths protects the two Concord rows of a one-key test: the
// leader's address and another node's are found by the shard's hash range
// and the nodes' addresses (node 1 as the other when it does not lead),
// nothing when the leader is unknown, and the goal line judges each row.
func TestBothPaths(t *testing.T) {
	shards := []shardRange{{StartHash: 0, EndHash: 99, Leader: 2}, {StartHash: 100, EndHash: 199, Leader: 1}, {StartHash: 200, EndHash: 299}}
	nodes := []nodeAddr{{1, "a:1"}, {2, "b:1"}, {3, "c:1"}}
	endpoints := []string{"a:1", "b:1", "c:1"}
	for _, c := range []struct {
		h             uint64
		leader, other int
		ok            bool
	}{{50, 1, 0, true}, {150, 0, 1, true}, {250, 0, 0, false}, {400, 0, 0, false}} {
		l, o, ok := leaderAndOther(c.h, shards, nodes, endpoints)
		if l != c.leader || o != c.other || ok != c.ok {
			t.Errorf("hash %d: leader %d, other %d, ok %v; want %d, %d, %v", c.h, l, o, ok, c.leader, c.other, c.ok)
		}
	}
	if _, _, ok := leaderAndOther(50, shards, nodes, []string{"a:1", "c:1"}); ok {
		t.Error("a leader outside the endpoints was found")
	}
	g := goal([]result{
		{System: "concord", Test: "SET", Pipeline: 16, RPS: 600, Via: "leader"},
		{System: "concord", Test: "SET", Pipeline: 16, RPS: 400, Via: "forwarded"},
		{System: "redis-everysec", Test: "SET", Pipeline: 16, RPS: 1000},
	})
	for _, want := range []string{"met through the key's leader (SET -P 16: Concord 600 requests/s, 60.0 %",
		"; not met through a node that forwards to it (SET -P 16: Concord 400 requests/s, 40.0 %"} {
		if !strings.Contains(g, want) {
			t.Errorf("goal %q lacks %q", g, want)
		}
	}
}
