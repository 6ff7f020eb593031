package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/concord-kv/concord/api/concordpb"
)

// TestListJSONContract pins the JSON that scripts read from `node list` and
// `shard list`: field names, lower-case states and roles, node ids in
// replicas, a shard's size in bytes, the meta shard left out unless asked for, and every column of
// the table (VERSION too: a script must not have to parse the table for it).
func TestListJSONContract(t *testing.T) {
	st := &concordpb.StatusResponse{
		Nodes: []*concordpb.NodeStatus{
			{Node: &concordpb.NodeDescriptor{NodeId: 1, Address: "a:1"}, Replicas: 2, Leaders: 1, LastHeartbeatAgeSeconds: 0.5, DiskBytes: 4096, Version: 6},
			{Node: &concordpb.NodeDescriptor{NodeId: 2, Address: "b:1", State: concordpb.NodeState_NODE_LEAVING}, LastHeartbeatAgeSeconds: -1},
		},
		Shards: []*concordpb.ShardStatus{
			{Shard: &concordpb.ShardDescriptor{ShardId: 0}, IsMeta: true},
			{Shard: &concordpb.ShardDescriptor{ShardId: 1, StartHash: 0, EndHash: 99, Epoch: 3, KeyHash: 1, Replicas: []*concordpb.ReplicaDescriptor{
				{ReplicaId: 1, NodeId: 1}, {ReplicaId: 7, NodeId: 2, Role: concordpb.ReplicaRole_REPLICA_LEARNER}}},
				LeaderNodeId: 1, UnderReplicated: true, ApproxBytes: 7 << 20},
		},
	}
	var nodes []map[string]any
	roundTrip(t, nodesJSON(st), &nodes)
	if len(nodes) != 2 || nodes[0]["id"] != 1.0 || nodes[0]["addr"] != "a:1" || nodes[0]["state"] != "up" ||
		nodes[0]["replicas"] != 2.0 || nodes[0]["leaders"] != 1.0 || nodes[0]["last_heartbeat_age_s"] != 0.5 ||
		nodes[0]["version"] != 6.0 ||
		nodes[1]["state"] != "leaving" || nodes[1]["last_heartbeat_age_s"] != -1.0 || nodes[1]["version"] != 0.0 {
		t.Fatalf("node list JSON: %v", nodes)
	}
	var shards []map[string]any
	roundTrip(t, shardsJSON(st, false), &shards)
	want := `[{"approx_bytes":7340032,"end_hash":99,"epoch":3,"id":1,"key_hash":"tags","leader":1,"meta":false,"replica_ids":[1,7],"replicas":[1,2],"roles":["voter","learner"],"start_hash":0,"under_replicated":true}]`
	if got, _ := json.Marshal(shards); string(got) != want {
		t.Fatalf("shard list JSON:\n got %s\nwant %s", got, want)
	}
	if all := shardsJSON(st, true); len(all) != 2 || !all[0].Meta {
		t.Fatalf("shard list --meta: %+v", all)
	}
}

func roundTrip(t *testing.T, v any, into any) {
	t.Helper()
	var b bytes.Buffer
	if err := printJSON(&b, v); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b.Bytes(), into); err != nil {
		t.Fatalf("%s: %v", b.String(), err)
	}
}

// TestShardListTextShowsKeyHash: docs/redis.md says `concord shard list`
// shows key_hash (tags or whole); the table form (the default output)
// must say it too, not only -o json.
func TestShardListTextShowsKeyHash(t *testing.T) {
	var b strings.Builder
	printShards(&b, []shardJSON{{ID: 1, Replicas: []uint64{}, ReplicaIDs: []uint64{}, Roles: []string{}, KeyHash: "tags"}})
	if !strings.Contains(b.String(), "tags") {
		t.Fatalf("shard list table does not show key_hash:\n%s", b.String())
	}
}

// TestShardSizeColumns: `shard list` and `status` show each shard's size
// (ShardStatus.approx_bytes) in a SIZE column after the existing ones,
// in the units node list uses, and "-" for a shard of unknown size.
func TestShardSizeColumns(t *testing.T) {
	st := &concordpb.StatusResponse{Shards: []*concordpb.ShardStatus{
		{Shard: &concordpb.ShardDescriptor{ShardId: 1}, ApproxBytes: 12<<20 + 3<<20/10},
		{Shard: &concordpb.ShardDescriptor{ShardId: 2}},
		{Shard: &concordpb.ShardDescriptor{ShardId: 3}, ApproxBytes: 5 << 30},
	}}
	check := func(cmd, table string) {
		t.Helper()
		lines := strings.Split(strings.TrimSpace(table), "\n")
		if len(lines) < 4 {
			t.Fatalf("%s table:\n%s", cmd, table)
		}
		lines = lines[len(lines)-4:] // the shard table: header and three shards
		ends := []string{"UNDER-REPLICATED  SIZE", "12.3M", "-", "5.0G"}
		for i, end := range ends {
			if !strings.HasSuffix(strings.TrimRight(lines[i], " "), end) {
				t.Fatalf("%s table: line %d should end with %q:\n%s", cmd, i, end, table)
			}
		}
	}
	var b strings.Builder
	printShards(&b, shardsJSON(st, false))
	check("shard list", b.String())
	b.Reset()
	printStatus(&b, st)
	check("status", b.String())
}

// TestNodeListShowsLowSpace: `node list` shows each node's free space and
// flags the one low on space (the cause of the space alarm), in the table
// (FREE, "LOW") and in JSON (disk_free_bytes, disk_reserve_bytes,
// disk_low); a node with the guard off shows "-".
func TestNodeListShowsLowSpace(t *testing.T) {
	st := &concordpb.StatusResponse{Nodes: []*concordpb.NodeStatus{
		{Node: &concordpb.NodeDescriptor{NodeId: 1, Address: "a:1"}, DiskFreeBytes: 800 << 20, DiskReserveBytes: 1 << 30, DiskLow: true},
		{Node: &concordpb.NodeDescriptor{NodeId: 2, Address: "b:1"}, DiskFreeBytes: 5 << 30, DiskReserveBytes: 1 << 30},
		{Node: &concordpb.NodeDescriptor{NodeId: 3, Address: "c:1"}},
	}}
	var b strings.Builder
	printNodes(&b, st)
	lines := strings.Split(b.String(), "\n")
	if !strings.Contains(lines[0], "FREE") || !strings.Contains(lines[1], "800.0M LOW") ||
		!strings.Contains(lines[2], "5.0G") || strings.Contains(lines[2], "LOW") || !strings.Contains(lines[3], " - ") {
		t.Fatalf("node list table:\n%s", b.String())
	}
	var nodes []map[string]any
	roundTrip(t, nodesJSON(st), &nodes)
	if nodes[0]["disk_low"] != true || nodes[0]["disk_free_bytes"] != float64(800<<20) || nodes[0]["disk_reserve_bytes"] != float64(1<<30) ||
		nodes[1]["disk_low"] != false {
		t.Fatalf("node list JSON: %v", nodes)
	}
}

// TestNodeListShowsTentativeWrites: a LEAVING node holding tentative
// writes, which it waits for before it is removed, says so in the
// table's STATE and in JSON (tentative_writes); an UP node's count shows
// in JSON only.
func TestNodeListShowsTentativeWrites(t *testing.T) {
	st := &concordpb.StatusResponse{Nodes: []*concordpb.NodeStatus{
		{Node: &concordpb.NodeDescriptor{NodeId: 1, Address: "a:1"}, TentativeWrites: 2},
		{Node: &concordpb.NodeDescriptor{NodeId: 4, Address: "d:1", State: concordpb.NodeState_NODE_LEAVING}, TentativeWrites: 3},
		{Node: &concordpb.NodeDescriptor{NodeId: 5, Address: "e:1", State: concordpb.NodeState_NODE_LEAVING}},
		{Node: &concordpb.NodeDescriptor{NodeId: 6, Address: "f:1", State: concordpb.NodeState_NODE_LEAVING}, TentativeWrites: 1},
	}}
	var b strings.Builder
	printNodes(&b, st)
	lines := strings.Split(b.String(), "\n")
	if strings.Contains(lines[1], "tentative") || !strings.Contains(lines[2], "leaving (holds 3 tentative writes)") ||
		strings.Contains(lines[3], "tentative") || !strings.Contains(lines[4], "leaving (holds 1 tentative write) ") {
		t.Fatalf("node list table:\n%s", b.String())
	}
	var nodes []map[string]any
	roundTrip(t, nodesJSON(st), &nodes)
	if nodes[0]["tentative_writes"] != float64(2) || nodes[1]["tentative_writes"] != float64(3) || nodes[2]["tentative_writes"] != float64(0) {
		t.Fatalf("node list JSON: %v", nodes)
	}
}
