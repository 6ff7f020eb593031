// Package scheduler is the placement service's planner: given a View of the
// cluster (the nodes and their states, each node's last heartbeat report,
// every shard's descriptor, the shards with a change already under way, and
// the time), Schedule returns the Steps that move the cluster towards where
// it should be. The meta shard's leader builds the View, calls Schedule, and
// executes the steps; this package decides, the node acts.
//
// # What it is not
//
// The scheduler is pure. It starts no goroutines, reads no clock (View.Now
// is an input), touches no network, disk or os, and keeps no state between
// calls: the same View always gives the same Steps, in the same order,
// whatever the order of the View's slices and maps. Randomness, if a future
// checker needs it, is injected through the View, never drawn from a global
// source. That is what lets the planner be tested with datadriven scripts
// (testdata/) and checked against a brute-force oracle, and what lets a
// simulation replay a placement decision from a seed.
//
// It does not execute steps, retry them, or remember that it asked for one:
// the executor marks a shard busy while its step runs and hands that set back
// as View.InFlight, so a shard is never given a second step while one runs.
//
// # What it plans today
//
// One checker, ported from the node's repair loop: every replica on a node in
// state REPLACED (its data is gone; a fresh process took its address under a
// new id) is replaced by a new replica on the node that replaced it, once
// that node is UP. The step is a single joint configuration change (add the
// new replica and remove the old one together, which is what the cluster's
// ChangeReplicas does) sent to the shard's leader as the heartbeats report it
// (see Leaders). A shard with no known leader, or with a change in flight,
// gets no step this round; the next round tries again.
//
// # How it grows
//
// The step vocabulary (StepKind) already names the operations the placement
// work that follows needs: adding a replica as a learner, promoting it,
// removing a replica, transferring leadership, and marking a node's state.
// Planned additions are further checkers, each a pure function of the View:
// dead-node detection (a node silent for longer than a grace period is marked
// dead and its replicas replaced, learner first, so a replica is never
// removed before its replacement caught up), restoring shards below the
// replication factor, and balancing replica and leader counts across nodes.
//
// # Concurrency
//
// Every function is safe to call from any goroutine; none mutates its
// arguments. A View must not be modified while a call that reads it runs.
//
// # Usage
//
//	v := scheduler.View{Now: now, Settings: scheduler.DefaultSettings(hb),
//		Nodes: nodes, Shards: shards, Reports: reports, InFlight: busy}
//	for _, s := range scheduler.Schedule(v) {
//		execute(s) // today: s.Kind == StepReplace → ChangeReplicas on s.Via
//	}
package scheduler
