package scheduler

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
)

// TestSchedule runs the scripts in testdata/. It protects the planner's
// decisions: which replicas get replaced, on which node, through which
// leader, and when nothing must happen. Rewrite the golden output with
// `go test ./internal/placement/scheduler -rewrite` and read the diff.
//
// Commands (all ids are plain numbers; s, n and r prefixes are accepted):
//
//	reset                                   empty view, default settings
//	settings [report-max-age=3s] [suspect-after=5s] [dead-after=60s]
//	         [replication=3] [meta-replication=5] [max-moves=2] [catch-up=100]
//	         [learner-timeout=30m]
//	node id=3 [state=up|replaced|suspect|dead|leaving|removed] [replaced-by=4]
//	                                        add or overwrite
//	shard id=1 replicas=(1@1,2@2,3@3l) [epoch=1]
//	                                        replica@node; a trailing l: learner
//	report node=1 age=1s [term=5] [leader=(s1,s2)] [follower=(s3)]
//	       [led-by=2] [commit=10] [applied=10] [desc-epoch=3] [low]
//	       [free=10G] [reserve=1G] [size=(s1:2G,s2:10M)] [tentative=3]
//	       [unaware] [stopping]
//	                                        received age before now; followers
//	                                        name the replica on node led-by
//	                                        as leader; every replica reports
//	                                        commit and applied (default 10)
//	                                        and the descriptor epoch it has
//	                                        applied (default 0: none given);
//	                                        low: the node says its disk is low;
//	                                        free, reserve: its space guard's
//	                                        figures (default 0: guard off);
//	                                        size: the approx_bytes its replica
//	                                        of each shard named reports
//	                                        (default 0: unknown); bytes take
//	                                        a K, M or G suffix (binary);
//	                                        tentative: the tentative writes
//	                                        it holds (default 0); unaware:
//	                                        a node recorded LEAVING sent it
//	                                        before it knew (SawLeaving false);
//	                                        stopping: the node said it is
//	                                        stopping cleanly (Stopping)
//	observed age=30s                        ObservedSince = now - age
//	tick d=10s                              now += d (reports age)
//	inflight s=(2,3) | done s=2             mark / clear shards busy
//	running s=1 kind=add-learner [target=4] [replica-node=2] | stopped s=1
//	                                        InFlightSteps[s1] set / cleared
//	override s=1 n=2                        LeaderOverride[s1] = n2
//	learner s=1 r=3 age=31m                 LearnerSince[s1][r3] = now - age
//	stuck s=1 n=3 age=1m                    StuckLearners[s1][n3] = now - age
//	schedule                                prints Schedule(view)
//	leaders                                 prints Leaders(view)
//	states                                  prints NodeStates(view)
//	low-space                               prints LowOnSpace(view)
//	health                                  prints Health(view)
func TestSchedule(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		e := newEnv()
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			return e.handle(t, d)
		})
	})
}

// base is the harness's fixed "now"; report ages count back from it.
var base = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

type env struct{ v View }

func newEnv() *env {
	return &env{v: View{
		Now: base, Settings: DefaultSettings(time.Second),
		Reports: map[ids.NodeID]Report{}, InFlight: map[ids.ShardID]bool{},
		InFlightSteps: map[ids.ShardID]Step{}, LeaderOverride: map[ids.ShardID]ids.NodeID{},
		LearnerSince: map[ids.ShardID]map[ids.ReplicaID]time.Time{}, StuckLearners: map[ids.ShardID]map[ids.NodeID]time.Time{},
	}}
}

func (e *env) handle(t *testing.T, d *datadriven.TestData) string {
	switch d.Cmd {
	case "reset":
		*e = *newEnv()
	case "settings":
		e.settings(t, d)
	case "observed":
		e.v.ObservedSince = e.v.Now.Add(-duration(t, d, "age"))
	case "tick":
		e.v.Now = e.v.Now.Add(duration(t, d, "d"))
	case "running":
		e.running(t, d)
	case "stopped":
		delete(e.v.InFlightSteps, ids.ShardID(number(t, d, "s")))
	case "states":
		return describeStates(e.v)
	case "health":
		return describeHealth(Health(e.v))
	case "node":
		e.node(t, d)
	case "shard":
		e.shard(t, d)
	case "report":
		e.report(t, d)
	case "inflight", "done":
		for _, s := range numbers(t, d, "s") {
			e.v.InFlight[ids.ShardID(s)] = d.Cmd == "inflight"
		}
	case "override":
		e.v.LeaderOverride[ids.ShardID(number(t, d, "s"))] = ids.NodeID(number(t, d, "n"))
	case "learner":
		shard := ids.ShardID(number(t, d, "s"))
		if e.v.LearnerSince[shard] == nil {
			e.v.LearnerSince[shard] = map[ids.ReplicaID]time.Time{}
		}
		e.v.LearnerSince[shard][ids.ReplicaID(number(t, d, "r"))] = e.v.Now.Add(-duration(t, d, "age"))
	case "stuck":
		shard := ids.ShardID(number(t, d, "s"))
		if e.v.StuckLearners[shard] == nil {
			e.v.StuckLearners[shard] = map[ids.NodeID]time.Time{}
		}
		e.v.StuckLearners[shard][ids.NodeID(number(t, d, "n"))] = e.v.Now.Add(-duration(t, d, "age"))
	case "schedule":
		steps := Schedule(e.v)
		checkSteps(t, e.v, steps)
		return DescribeSteps(steps)
	case "leaders":
		return DescribeLeaders(Leaders(e.v), e.v)
	case "low-space":
		return describeLow(LowOnSpace(e.v))
	default:
		d.Fatalf(t, "unknown command %q", d.Cmd)
	}
	return "ok"
}

func (e *env) node(t *testing.T, d *datadriven.TestData) {
	n := &concordpb.NodeDescriptor{NodeId: number(t, d, "id")}
	n.Address = fmt.Sprintf("10.0.0.%d:7000", n.NodeId)
	if d.HasArg("state") {
		var state string
		d.ScanArgs(t, "state", &state)
		st, ok := nodeStates[state]
		if !ok {
			d.Fatalf(t, "unknown state %q", state)
		}
		n.State = st
	}
	if d.HasArg("replaced-by") {
		n.ReplacedBy = number(t, d, "replaced-by")
	}
	e.v.Nodes = slices.DeleteFunc(e.v.Nodes, func(o *concordpb.NodeDescriptor) bool { return o.GetNodeId() == n.NodeId })
	e.v.Nodes = append(e.v.Nodes, n)
}

func (e *env) shard(t *testing.T, d *datadriven.TestData) {
	s := &concordpb.ShardDescriptor{ShardId: number(t, d, "id"), Epoch: 1}
	if d.HasArg("epoch") {
		s.Epoch = number(t, d, "epoch")
	}
	arg, _ := d.Arg("replicas")
	for _, val := range arg.Vals {
		rs, ns, ok := strings.Cut(val, "@")
		if !ok {
			d.Fatalf(t, "replica %q is not replica@node", val)
		}
		r := &concordpb.ReplicaDescriptor{ReplicaId: parse(t, d, rs)}
		if n, learner := strings.CutSuffix(ns, "l"); learner {
			ns, r.Role = n, concordpb.ReplicaRole_REPLICA_LEARNER
		}
		r.NodeId = parse(t, d, ns)
		s.Replicas = append(s.Replicas, r)
		s.NextReplicaId = max(s.NextReplicaId, r.ReplicaId+1)
	}
	e.v.Shards = slices.DeleteFunc(e.v.Shards, func(o *concordpb.ShardDescriptor) bool { return o.GetShardId() == s.ShardId })
	e.v.Shards = append(e.v.Shards, s)
}

// report records node's heartbeat, received age ago. Replica ids come from
// the shard descriptors already declared.
func (e *env) report(t *testing.T, d *datadriven.TestData) {
	node := ids.NodeID(number(t, d, "node"))
	var term uint64 = 1
	if d.HasArg("term") {
		term = number(t, d, "term")
	}
	commit, applied := uint64(10), uint64(10)
	if d.HasArg("commit") {
		commit = number(t, d, "commit")
	}
	if d.HasArg("applied") {
		applied = number(t, d, "applied")
	}
	var epoch uint64
	if d.HasArg("desc-epoch") {
		epoch = number(t, d, "desc-epoch")
	}
	var ledBy ids.NodeID
	if d.HasArg("led-by") {
		ledBy = ids.NodeID(number(t, d, "led-by"))
	}
	r := Report{At: e.v.Now.Add(-duration(t, d, "age")), DiskLow: d.HasArg("low")}
	if d.HasArg("free") {
		r.DiskFree = byteCount(t, d, oneValue(t, d, "free"))
	}
	if d.HasArg("reserve") {
		r.DiskReserve = byteCount(t, d, oneValue(t, d, "reserve"))
	}
	if d.HasArg("tentative") {
		r.Tentative = number(t, d, "tentative")
	}
	r.Stopping = d.HasArg("stopping")
	// A node reports the state its own record has; a LEAVING node's
	// report has seen it unless the test says it was sent before.
	for _, n := range e.v.Nodes {
		if ids.NodeID(n.GetNodeId()) == node {
			r.SawLeaving = n.GetState() == concordpb.NodeState_NODE_LEAVING && !d.HasArg("unaware")
		}
	}
	sizes := map[uint64]uint64{}
	if arg, ok := d.Arg("size"); ok {
		for _, val := range arg.Vals {
			s, b, ok := strings.Cut(val, ":")
			if !ok {
				d.Fatalf(t, "size %q is not shard:bytes", val)
			}
			sizes[parse(t, d, s)] = byteCount(t, d, b)
		}
	}
	for _, kind := range []string{"leader", "follower"} {
		for _, s := range numbers(t, d, kind) {
			rs := &concordpb.ReplicaStatus{
				ShardId: s, ReplicaId: e.replicaID(ids.ShardID(s), node), NodeId: uint64(node),
				Term: term, IsLeader: kind == "leader", CommitIndex: commit, AppliedIndex: applied,
				DescriptorEpoch: epoch, ApproxBytes: sizes[s],
			}
			if kind == "leader" {
				rs.LeaderReplicaId = rs.ReplicaId
			} else if ledBy != 0 {
				rs.LeaderReplicaId = e.replicaID(ids.ShardID(s), ledBy)
			}
			r.Replicas = append(r.Replicas, rs)
		}
	}
	e.v.Reports[node] = r
}

// describeLow lists the nodes held low on space, in id order.
func describeLow(low map[ids.NodeID]bool) string {
	if len(low) == 0 {
		return "none"
	}
	var out []string
	for _, id := range sortedKeys(low) {
		out = append(out, fmt.Sprintf("n%d", id))
	}
	return strings.Join(out, " ")
}

// nodeStates spells the node states for the scripts.
var nodeStates = map[string]concordpb.NodeState{
	"up": concordpb.NodeState_NODE_UP, "replaced": concordpb.NodeState_NODE_REPLACED,
	"suspect": concordpb.NodeState_NODE_SUSPECT, "dead": concordpb.NodeState_NODE_DEAD,
	"leaving": concordpb.NodeState_NODE_LEAVING, "removed": concordpb.NodeState_NODE_REMOVED,
}

func (e *env) settings(t *testing.T, d *datadriven.TestData) {
	s := &e.v.Settings
	for _, a := range d.CmdArgs {
		switch a.Key {
		case "report-max-age":
			s.ReportMaxAge = duration(t, d, a.Key)
		case "suspect-after":
			s.SuspectAfter = duration(t, d, a.Key)
		case "dead-after":
			s.DeadAfter = duration(t, d, a.Key)
		case "replication":
			s.Replication = int(number(t, d, a.Key))
		case "meta-replication":
			s.MetaReplication = int(number(t, d, a.Key))
		case "max-moves":
			s.MaxMovesPerNode = int(number(t, d, a.Key))
		case "catch-up":
			s.CatchUpEntries = number(t, d, a.Key)
		case "learner-timeout":
			s.LearnerTimeout = duration(t, d, a.Key)
		default:
			d.Fatalf(t, "unknown setting %q", a.Key)
		}
	}
}

// running records a step in flight on shard s, as the executor would.
func (e *env) running(t *testing.T, d *datadriven.TestData) {
	var kind string
	d.ScanArgs(t, "kind", &kind)
	st := Step{Shard: ids.ShardID(number(t, d, "s"))}
	for k, name := range stepKindNames {
		if name == kind {
			st.Kind = k
		}
	}
	if st.Kind == 0 {
		d.Fatalf(t, "unknown step kind %q", kind)
	}
	if d.HasArg("target") {
		st.Target = ids.NodeID(number(t, d, "target"))
	}
	if d.HasArg("replica-node") {
		st.ReplicaNode = ids.NodeID(number(t, d, "replica-node"))
	}
	e.v.InFlightSteps[st.Shard] = st
}

func describeStates(v View) string {
	states := NodeStates(v)
	var b strings.Builder
	for _, id := range sortedKeys(states) {
		fmt.Fprintf(&b, "n%d: %s\n", id, states[id])
	}
	return strings.TrimSuffix(b.String(), "\n")
}

func describeHealth(hs []ShardHealth) string {
	if len(hs) == 0 {
		return "no shards"
	}
	var b strings.Builder
	for _, h := range hs {
		fmt.Fprintf(&b, "s%d: want %d, voters %d (live %d, good %d), learners %d", h.Shard, h.Want, h.Voters, h.LiveVoters, h.GoodVoters, h.Learners)
		if h.UnderReplicated {
			b.WriteString(", under-replicated")
		}
		if h.QuorumLost {
			b.WriteString(", quorum lost")
		}
		b.WriteString("\n")
	}
	return strings.TrimSuffix(b.String(), "\n")
}

func (e *env) replicaID(shard ids.ShardID, node ids.NodeID) uint64 {
	for _, s := range e.v.Shards {
		if ids.ShardID(s.GetShardId()) == shard {
			return replicaOn(s, node).GetReplicaId()
		}
	}
	return 0
}

// number scans key's single value; numbers scans all of them (none if the
// key is absent). Both accept an s, n or r prefix: "s1", "n3", "r2".
func number(t *testing.T, d *datadriven.TestData, key string) uint64 {
	vals := numbers(t, d, key)
	if len(vals) != 1 {
		d.Fatalf(t, "%s needs one value, got %d", key, len(vals))
	}
	return vals[0]
}

func numbers(t *testing.T, d *datadriven.TestData, key string) []uint64 {
	arg, ok := d.Arg(key)
	if !ok {
		return nil
	}
	out := make([]uint64, len(arg.Vals))
	for i, v := range arg.Vals {
		out[i] = parse(t, d, v)
	}
	return out
}

func parse(t *testing.T, d *datadriven.TestData, s string) uint64 {
	n, err := strconv.ParseUint(strings.TrimLeft(s, "snr"), 10, 64)
	if err != nil {
		d.Fatalf(t, "%q: %v", s, err)
	}
	return n
}

// oneValue is key's single value, as written.
func oneValue(t *testing.T, d *datadriven.TestData, key string) string {
	arg, _ := d.Arg(key)
	if len(arg.Vals) != 1 {
		d.Fatalf(t, "%s needs one value, got %d", key, len(arg.Vals))
	}
	return arg.Vals[0]
}

// byteCount parses a byte count: digits, then K, M or G for KiB, MiB, GiB.
func byteCount(t *testing.T, d *datadriven.TestData, s string) uint64 {
	shift := 0
	switch {
	case strings.HasSuffix(s, "K"):
		shift = 10
	case strings.HasSuffix(s, "M"):
		shift = 20
	case strings.HasSuffix(s, "G"):
		shift = 30
	}
	if shift > 0 {
		s = s[:len(s)-1]
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		d.Fatalf(t, "%q: %v", s, err)
	}
	return n << shift
}

func duration(t *testing.T, d *datadriven.TestData, key string) time.Duration {
	var s string
	d.ScanArgs(t, key, &s)
	dur, err := time.ParseDuration(s)
	if err != nil {
		d.Fatalf(t, "%s=%q: %v", key, s, err)
	}
	return dur
}
