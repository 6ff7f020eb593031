package main

import (
	"strings"
	"testing"

	"github.com/concord-kv/concord/api/concordpb"
)

// cluster3 is three UP nodes and shards s1..s3, each on every node, led
// by nodes 1, 2, 3.
func cluster3() view {
	v := view{}
	for id := uint64(1); id <= 3; id++ {
		v.nodes = append(v.nodes, nodeView{id: id, state: concordpb.NodeState_NODE_UP})
	}
	for s := uint64(1); s <= 3; s++ {
		v.shards = append(v.shards, shardView{id: s, leader: s,
			replicas: []replicaView{{node: 1}, {node: 2}, {node: 3}}})
	}
	return v
}

func TestCheckBalanced(t *testing.T) {
	if d := cluster3().check(3, 3, 5); !d.balanced() || d.why != "" {
		t.Fatalf("balanced cluster judged %+v", d)
	}
}

func TestCheckShapeProblems(t *testing.T) {
	cases := map[string]func(v *view){
		"4 nodes up":       func(v *view) {}, // want 4 below
		"learner":          func(v *view) { v.shards[1].replicas[2].learner = true },
		"under-replicated": func(v *view) { v.shards[0].underReplicated = true },
		"no leader":        func(v *view) { v.shards[2].leader = 0 },
		"2 replicas":       func(v *view) { v.shards[0].replicas = v.shards[0].replicas[:2] },
		"is leaving":       func(v *view) { v.nodes[2].state = concordpb.NodeState_NODE_LEAVING },
	}
	for want, mutate := range cases {
		v := cluster3()
		mutate(&v)
		nodes := 3
		if want == "4 nodes up" {
			nodes = 4
		}
		d := v.check(nodes, 3, 5)
		if d.shaped || d.balanced() || !strings.Contains(d.why, strings.TrimPrefix(want, "4 ")) {
			t.Errorf("%s: got %+v", want, d)
		}
	}
}

// A removed node is ignored; counts are judged over the UP nodes only.
func TestCheckIgnoresRemovedAndJudgesCounts(t *testing.T) {
	v := cluster3()
	v.nodes = append(v.nodes, nodeView{id: 4, state: concordpb.NodeState_NODE_REMOVED})
	if d := v.check(3, 3, 5); !d.balanced() {
		t.Fatalf("removed node should not count: %+v", d)
	}
	// Node 1 leads all three shards: replicas fine, leaders 3,0,0 (mean 1).
	for i := range v.shards {
		v.shards[i].leader = 1
	}
	d := v.check(3, 3, 5)
	if !d.shaped || !d.replicas || d.leaders || !strings.Contains(d.why, "leader counts") {
		t.Fatalf("leader imbalance not seen: %+v", d)
	}
}

func TestWithinOne(t *testing.T) {
	nodes := []uint64{1, 2, 3, 4}
	// total 18, mean 4.5: 6 is 1.5 above.
	if withinOne(nodes, map[uint64]int{1: 6, 2: 4, 3: 4, 4: 4}) {
		t.Error("6 with mean 4.5 judged within one")
	}
	// total 17, mean 4.25: 5 and 4 are within one.
	if !withinOne(nodes, map[uint64]int{1: 5, 2: 4, 3: 4, 4: 4}) {
		t.Error("5,4,4,4 judged unbalanced")
	}
}

// The meta shard wants five replicas once five nodes are up.
func TestCheckMetaReplication(t *testing.T) {
	v := view{}
	for id := uint64(1); id <= 5; id++ {
		v.nodes = append(v.nodes, nodeView{id: id, state: concordpb.NodeState_NODE_UP})
	}
	v.shards = []shardView{{id: 0, meta: true, leader: 1, replicas: []replicaView{{node: 1}, {node: 2}, {node: 3}}}}
	if d := v.check(5, 3, 5); d.shaped || !strings.Contains(d.why, "want 5") {
		t.Fatalf("meta shard with 3 replicas on 5 nodes: %+v", d)
	}
}

func TestKeysPerNode(t *testing.T) {
	v := cluster3()
	v.shards[2].replicas = []replicaView{{node: 1}, {node: 2}, {node: 4}} // node 4 is not up
	v.shards[2].leader = 1
	held, led := v.keysPerNode(map[uint64]int64{1: 10, 2: 20, 3: 30})
	if held[1] != 60 || held[2] != 60 || held[3] != 30 || len(held) != 3 {
		t.Errorf("held = %v", held)
	}
	if led[1] != 40 || led[2] != 20 || led[3] != 0 {
		t.Errorf("led = %v", led)
	}
}

func TestParseInts(t *testing.T) {
	if got, err := parseInts("3, 5,7", 1); err != nil || len(got) != 3 || got[1] != 5 {
		t.Errorf("parseInts = %v, %v", got, err)
	}
	for _, bad := range []string{"", "3,x", "0"} {
		if _, err := parseInts(bad, 1); err == nil {
			t.Errorf("parseInts(%q) accepted", bad)
		}
	}
}

// Node 1 leads s1..s3; only s2 has a voter on a node leading two fewer.
func TestTransferOptions(t *testing.T) {
	v := cluster3()
	v.nodes = append(v.nodes, nodeView{id: 4, state: concordpb.NodeState_NODE_UP})
	for i := range v.shards {
		v.shards[i].leader = 1
	}
	v.shards[1].replicas = []replicaView{{node: 1}, {node: 2}, {node: 4}, {node: 3, learner: true}}
	got := v.transferOptions()
	want := "s1 led by n1: transfer targets [n2 n3]; s2 led by n1: transfer targets [n2 n4]; s3 led by n1: transfer targets [n2 n3]"
	if got != want {
		t.Errorf("transferOptions =\n%s\nwant\n%s", got, want)
	}
}
