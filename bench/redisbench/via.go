package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"

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
	var shards []shardRange
	var nodes []nodeAddr
	if cliJSON(o.concord, s.Endpoints[0], &shards, "shard", "list") != nil || cliJSON(o.concord, s.Endpoints[0], &nodes, "node", "list") != nil {
		return ""
	}
	return leaderVia(routing.Hash([]byte(oneKey(test))), shards, nodes, s.Endpoints[0])
}

// leaderVia is viaOf's decision: the shard whose range (both ends
// included, as routing.Table's) holds h, its leader's address, and whether
// that is node1's.
func leaderVia(h uint64, shards []shardRange, nodes []nodeAddr, node1 string) string {
	for _, s := range shards {
		if h < s.StartHash || h > s.EndHash || s.Leader == 0 {
			continue
		}
		for _, n := range nodes {
			if n.ID == s.Leader {
				if n.Addr == node1 {
					return "leader"
				}
				return "forwarded"
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
