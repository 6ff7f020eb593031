package robustness

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/concord-kv/concord/internal/testcluster"
	"github.com/concord-kv/concord/internal/version"
)

// TestAvailableNoLostWrites checks available mode's one exact promise
// under faults: no acknowledged write is lost. Writers put unique keys,
// each once, with PutAvailable through a random node while the nemesis
// cuts nodes off, kills, pauses and restarts them, joins nodes and removes
// them (the first fault is a removal of a node cut off meanwhile, so that
// it holds tentative writes when asked to leave); every put that returned
// success, committed or held as tentative, must read back with its value
// linearizably once the faults are healed and every node has reconciled
// what it held, also one held by a node since removed. Available mode is
// not linearizable, so this is not a porcupine history: with no overwrite
// and no delete, nothing may supersede a tentative write here.
//
// CONCORD_ROBUSTNESS_HISTORY sets the run's length (45 s), CONCORD_SEED
// the fault schedule (random, printed), CONCORD_AVAILABLE_FAULTS the
// kinds (availableFaultKinds, comma separated).
func TestAvailableNoLostWrites(t *testing.T) {
	d := envDuration(t, "CONCORD_ROBUSTNESS_HISTORY", 45*time.Second)
	seed := availableSeed(t)
	kinds := availableKinds(t)
	t.Logf("seed %d, faults %v, %v (rerun: CONCORD_SEED=%d CONCORD_AVAILABLE_FAULTS=%s go test -run TestAvailableNoLostWrites -v ./tests/robustness)",
		seed, kinds, d, seed, joinKinds(kinds))
	// The classic cluster, on membershipNodes when a node may go (so that
	// R remain), but with the default liveness, not membershipArgs: the
	// placement leader removes a LEAVING node it judges DEAD whatever it
	// holds (scheduler.holdsHints), so with --dead-after 5s a node being
	// removed that is cut off, paused or slow on a loaded box for 5 s
	// would lose its tentative writes by design. (killStayDead, which
	// needs the short timeouts, is not drawn here.)
	opts := clusterOptions(nil)
	if changesMembership(kinds) {
		opts.Nodes = membershipNodes
	}
	opts.HTTP = true // /metrics: concord_tentative_writes
	c := testcluster.New(t, opts)
	c.WaitReady(t, 60*time.Second)
	waitVersions(t, c)

	w := newAvailableWorkload(t, c, seed)
	members := &liveSet{}
	var removals []availableRemoval
	n := &nemesis{t: t, c: c, rng: rand.New(rand.NewPCG(seed, 0xfa17)), kinds: kinds, injected: map[faultKind]int{}, held: map[faultKind]int{}, members: members,
		cutOffRemoved: true,
		joined:        func(i int) { w.addNode(t, c, i) },
		removing:      func(i int) { removals = append(removals, w.removing(t, c, i)) },
	}
	if slices.Contains(kinds, removeNode) {
		n.opening = []faultKind{removeNode}
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	done := make(chan struct{})
	go func() { w.run(ctx); close(done) }()
	n.run(ctx) // heals its last fault before it returns
	healed := time.Now()
	<-done
	live := members.live(c.N())
	t.Logf("faults injected: %v; tentative writes held at the heal: %s", n.injected, heldNow(c, live))

	for _, i := range live {
		if !c.Running(i) {
			c.Start(i)
		}
	}
	n.waitHealthy(60 * time.Second)
	_, settleErr := waitNoTentative(c, live, availableSettle)
	took := time.Since(healed)
	if settleErr != nil {
		t.Errorf("the nodes did not reconcile every tentative write: %v", settleErr)
	}
	checkAvailableWrites(t, c, w, seed, took, live, removals)
}

// availableRemoval is a node the nemesis removed.
type availableRemoval struct {
	index int
	id    uint64
	held  string        // its concord_tentative_writes as its removal was awaited
	at    time.Duration // when the wait began, since the run began
}

// removing records node i, about to be awaited as it is removed (still
// cut off from its peers, not yet knowing it is leaving), with the
// tentative writes it holds.
func (w *availableWorkload) removing(t *testing.T, c *testcluster.Cluster, i int) availableRemoval {
	w.mu.Lock()
	r := availableRemoval{index: i, id: w.ids[i], at: time.Since(w.start)}
	w.mu.Unlock()
	if v, err := metricOf(c, i, "concord_tentative_writes"); err != nil {
		r.held = err.Error()
	} else {
		r.held = fmt.Sprint(v)
	}
	t.Logf("nemesis: node %d (index %d), being removed, holds %s tentative writes", r.id, i, r.held)
	return r
}

// heldNow says how many tentative writes each node of live holds.
func heldNow(c *testcluster.Cluster, live []int) string {
	var parts []string
	for _, i := range live {
		v, err := metricOf(c, i, "concord_tentative_writes")
		if err != nil {
			parts = append(parts, fmt.Sprintf("node %d: %v", i+1, err))
			continue
		}
		parts = append(parts, fmt.Sprintf("node %d: %v", i+1, v))
	}
	return strings.Join(parts, ", ")
}

// checkAvailableWrites reads back every put and fails for each
// acknowledged one that is missing or wrong; a put that failed may be
// present (it may have committed, or been held), but only with its value.
//
// Each removed node's acknowledged tentative writes are counted apart,
// and a removed node whose log says it was removed holding tentative
// writes fails the test: it lost them (logLostHints).
func checkAvailableWrites(t *testing.T, c *testcluster.Cluster, w *availableWorkload, seed uint64, took time.Duration, live []int, removals []availableRemoval) {
	acked, tentative, failed := w.snapshot()
	keys := make([]string, 0, len(acked)+len(failed))
	for _, a := range acked {
		keys = append(keys, a.key)
	}
	keys = append(keys, failed...)
	got, err := readBack(c.Client(t), keys, time.Now().Add(2*time.Minute))
	if err != nil {
		t.Fatalf("reading back (seed %d): %v", seed, err)
	}
	var lost []availableAck
	for _, a := range acked {
		if v, ok := got[a.key]; !ok || v != a.value {
			lost = append(lost, a)
		}
	}
	present := 0
	for _, k := range failed {
		if v, ok := got[k]; ok {
			present++
			if v != availableValue(k) {
				t.Errorf("%s, whose put failed, reads %q: not the value it was written with (seed %d)", k, v, seed)
			}
		}
	}
	elsewhere := w.heldElsewhere(acked)
	w.mu.Lock()
	errs, byNode, ids := fmt.Sprint(w.errs), fmt.Sprint(w.byNode), fmt.Sprint(w.ids)
	w.mu.Unlock()
	t.Logf("available: %d acknowledged (%d tentative, held by node id: %s (ids by node: %v), %d of them by a node the client tried after the one it was sent to; %d committed), %d lost; %d puts failed (%s), %d of them present; every node held none %v after the heal; reconciled (since each live node's last start) %s",
		len(acked), tentative, byNode, ids, elsewhere, len(acked)-tentative, len(lost), len(failed), errs, present, took.Round(time.Millisecond), reconciledTotals(c, live))
	for _, r := range removals {
		held, lostHeld := 0, 0
		for _, a := range acked {
			if a.heldBy == r.id {
				held++
			}
		}
		for _, a := range lost {
			if a.heldBy == r.id {
				lostHeld++
			}
		}
		t.Logf("removed node %d (index %d): held %s tentative writes at +%v as its removal was awaited; %d acknowledged puts were held by it, %d of them lost",
			r.id, r.index, r.held, r.at.Round(time.Millisecond), held, lostHeld)
		for _, line := range strings.Split(c.Log(r.index), "\n") {
			if strings.Contains(line, "was removed holding") {
				t.Errorf("removed node %d lost tentative writes (seed %d): %s", r.id, seed, line)
			}
		}
	}
	if len(acked) == 0 || tentative == 0 {
		t.Errorf("the run acknowledged %d puts, %d of them tentative: it checked nothing of available mode (seed %d)", len(acked), tentative, seed)
	}
	for _, a := range lost[:min(20, len(lost))] {
		t.Errorf("lost acknowledged write %s: reads %q (seed %d)", a, got[a.key], seed)
	}
	if len(lost) > 20 {
		t.Errorf("and %d more lost acknowledged writes (seed %d)", len(lost)-20, seed)
	}
	logLostKeys(t, c, lost)
}

// logLostKeys logs what the nodes' logs say about the first lost keys.
func logLostKeys(t *testing.T, c *testcluster.Cluster, lost []availableAck) {
	for _, a := range lost[:min(5, len(lost))] {
		for i := range c.N() {
			for _, line := range strings.Split(c.Log(i), "\n") {
				if strings.Contains(line, a.key) {
					t.Logf("node %d log on %s: %s", i+1, a.key, line)
				}
			}
		}
	}
}

// reconciledTotals sums concord_reconciled_total over the nodes of live,
// per outcome (a node that never reconciled reports none).
func reconciledTotals(c *testcluster.Cluster, live []int) string {
	var parts []string
	for _, outcome := range []string{"applied", "superseded", "refused"} {
		sum := 0.0
		for _, i := range live {
			if v, err := metricOf(c, i, fmt.Sprintf("concord_reconciled_total{outcome=%q}", outcome)); err == nil {
				sum += v
			}
		}
		parts = append(parts, fmt.Sprintf("%s %v", outcome, sum))
	}
	return strings.Join(parts, ", ")
}

// waitVersions waits until every node knows the cluster's version allows
// versions: until then a node fails an available write it cannot commit
// rather than hold it.
func waitVersions(t *testing.T, c *testcluster.Cluster) {
	testcluster.WaitFor(t, 30*time.Second, func() error {
		for i := range c.N() {
			v, err := metricOf(c, i, "concord_cluster_version")
			if err != nil {
				return err
			}
			if v < float64(version.Versions) {
				return fmt.Errorf("node %d knows cluster version %v", i+1, v)
			}
		}
		return nil
	})
}

// availableSeed is CONCORD_SEED, or a random seed.
func availableSeed(t *testing.T) uint64 {
	s := os.Getenv("CONCORD_SEED")
	if s == "" {
		return rand.Uint64() % 1_000_000_000
	}
	seed, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatalf("CONCORD_SEED: %v", err)
	}
	return seed
}

// availableKinds is CONCORD_AVAILABLE_FAULTS, or availableFaultKinds. A
// kind that loses hints by design (wipe, kill-and-stay-dead) is refused
// before any cluster starts.
func availableKinds(t *testing.T) []faultKind {
	s := os.Getenv("CONCORD_AVAILABLE_FAULTS")
	if s == "" {
		return availableFaultKinds
	}
	var kinds []faultKind
	for _, k := range strings.Split(s, ",") {
		if !slices.Contains(availableFaultKinds, faultKind(k)) {
			t.Fatalf("CONCORD_AVAILABLE_FAULTS: %q is not one of %v (wipe and kill-and-stay-dead lose a node's tentative writes by design)", k, availableFaultKinds)
		}
		kinds = append(kinds, faultKind(k))
	}
	return kinds
}
