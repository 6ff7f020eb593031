package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"

	"github.com/concord-kv/concord/bench/internal/systems"
	"github.com/concord-kv/concord/internal/routing"
)

// Without -r, redis-benchmark sends every command of a test to one key (the
// placeholder is left as written), so a Concord row measures either that
// key's leader or a node forwarding to it, by the luck of the cluster's
// start-up leader balancing: through the leader pipelined GET ran 1.7x,
// INCR 1.4x and SET 1.1x as fast as forwarded, in runs of the same hour
// (docs/benchmarks.md, Redis runs 21-23). The table says which.

// oneKey is the key redis-benchmark's test uses without -r.
func oneKey(test string) string {
	if test == "incr" {
		return "counter:__rand_int__"
	}
	return "key:__rand_int__" // set, get, mset (all ten pairs)
}

// shardRange and nodeAddr are the parts of `concord shard list` and
// `concord node list` (-o json) that viaOf reads.
type shardRange struct {
	KeyHash   string `json:"key_hash"` // "tags", "whole" (or absent: a node from before)
	StartHash uint64 `json:"start_hash"`
	EndHash   uint64 `json:"end_hash"`
	Leader    uint64 `json:"leader"` // node id; 0 if unknown
}

type nodeAddr struct {
	ID   uint64 `json:"id"`
	Addr string `json:"addr"`
}

// viaOf says whether node 1 led the shard of test's one key when asked
// ("leader") or forwarded to another node ("forwarded"), or "" when that
// does not apply (random keys, not Concord) or could not be found out.
func viaOf(o options, s *systems.System, test string) string {
	if s.Target != "concord" || o.r > 0 || len(s.Endpoints) == 0 {
		return ""
	}
	shards, nodes, err := clusterView(o, s)
	if err != nil {
		return ""
	}
	return leaderVia(keyHash(shards, oneKey(test)), shards, nodes, s.Endpoints[0])
}

// clusterView is what `concord shard list` and `concord node list` say.
func clusterView(o options, s *systems.System) ([]shardRange, []nodeAddr, error) {
	var shards []shardRange
	var nodes []nodeAddr
	if err := cliJSON(o.concord, s.Endpoints[0], &shards, "shard", "list"); err != nil {
		return nil, nil, err
	}
	if err := cliJSON(o.concord, s.Endpoints[0], &nodes, "node", "list"); err != nil {
		return nil, nil, err
	}
	return shards, nodes, nil
}

// keyHash is key's position in the hash space as the cluster's shards
// hash keys.
func keyHash(shards []shardRange, key string) uint64 {
	scheme := routing.KeyHashWhole
	if len(shards) > 0 && shards[0].KeyHash == "tags" {
		scheme = routing.KeyHashTags
	}
	return routing.HashFor(scheme, []byte(key))
}

// A path is where a Concord row's redis-benchmark connects: since the one
// key's leader serves it faster than a node that forwards to the leader,
// and which node leads is the luck of start-up balancing, each one-key test
// runs both ways (unless -both-paths=false) and the table has a row for each.
type path struct {
	via       string // "leader" or "forwarded"; "" for node 1, unmarked
	redisAddr string
}

// paths returns the two paths of test's one key, the leader's first, or
// nil when the cluster could not say who leads it.
func paths(o options, s *systems.System, test string) []path {
	shards, nodes, err := clusterView(o, s)
	if err != nil {
		return nil
	}
	leader, other, ok := leaderAndOther(keyHash(shards, oneKey(test)), shards, nodes, s.Endpoints)
	if !ok || len(s.RedisAddrs) != len(s.Endpoints) {
		return nil
	}
	return []path{{"leader", s.RedisAddrs[leader]}, {"forwarded", s.RedisAddrs[other]}}
}

// confirmPath is the via mark of a row run on pa: pa's own, if the key's
// leader is still where it was (a row is marked only for the path it
// measured), else "".
func confirmPath(o options, s *systems.System, test string, pa path) string {
	now := paths(o, s, test)
	if now == nil {
		return ""
	}
	if leads := now[0].redisAddr == pa.redisAddr; leads == (pa.via == "leader") {
		return pa.via
	}
	logf("%s %s: the key's leader moved during the row; it is left unmarked", s.Name, test)
	return ""
}

// leaderAndOther finds, among endpoints (the nodes' addresses, in the order
// of the system's Redis addresses), the node leading the shard whose range
// holds h and another node: node 1 when it does not lead, else the next.
func leaderAndOther(h uint64, shards []shardRange, nodes []nodeAddr, endpoints []string) (leader, other int, ok bool) {
	addr := leaderAddr(h, shards, nodes)
	leader = slices.Index(endpoints, addr)
	if addr == "" || leader < 0 || len(endpoints) < 2 {
		return 0, 0, false
	}
	if leader == 0 {
		return 0, 1, true
	}
	return leader, 0, true
}

// leaderVia is viaOf's decision: whether the leader of h's shard is node1.
func leaderVia(h uint64, shards []shardRange, nodes []nodeAddr, node1 string) string {
	switch addr := leaderAddr(h, shards, nodes); {
	case addr == "":
		return ""
	case addr == node1:
		return "leader"
	default:
		return "forwarded"
	}
}

// leaderAddr is the address of the node leading the shard whose range
// (both ends included, as routing.Table's) holds h, or "" if unknown.
func leaderAddr(h uint64, shards []shardRange, nodes []nodeAddr) string {
	for _, s := range shards {
		if h < s.StartHash || h > s.EndHash || s.Leader == 0 {
			continue
		}
		for _, n := range nodes {
			if n.ID == s.Leader {
				return n.Addr
			}
		}
	}
	return ""
}

// cliJSON runs `concord ARGS... -o json --endpoints addr` and decodes its output into v.
func cliJSON(bin, addr string, v any, args ...string) error {
	out, err := exec.Command(bin, append(args, "-o", "json", "--endpoints", addr, "--timeout", "5s")...).Output()
	if err != nil {
		return fmt.Errorf("concord %v: %w", args, err)
	}
	return json.NewDecoder(bytes.NewReader(out)).Decode(v)
}
