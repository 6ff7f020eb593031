package robustness

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// Mutation testing (make robustness-mutants; docs/testing.md): the nodes run
// a binary built with -tags mutant, and CONCORD_MUTANT names the bug planted
// in it (internal/mutant). TestMutant runs histories until one fails (the
// mutant is caught) or its budget is spent.

// mutantFaults are the fault kinds each mutant is hunted with: the faults
// that open the window its bug needs. CONCORD_FAULTS overrides them.
var mutantFaults = map[string][]faultKind{
	// A stale leader serves reads: a paused leader resumes with requests
	// queued and answers them before it learns of the new term; a cut-off
	// leader answers until CheckQuorum steps it down.
	"leader-read-no-readindex": {pauseLeader, leaderCutOff},
	// Unsynced writes survive kill -9 (the page cache keeps them), so only
	// a crash of every node can lose them, and only if the OS loses them.
	"ack-before-fsync": {crashAll, killLeader},
	// A retry after an ambiguous outcome (leader killed or cut off
	// mid-proposal) applies twice.
	"no-session-dedup": {killLeader, leaderCutOff},
	// A node votes, crashes, restarts without its vote and votes again in
	// the same term.
	"forget-vote": {killLeader, killFollower, restart},
	// Followers answer linearizable reads from their own state.
	"follower-read": {killLeader, bridge},
	// A snapshot rebuilds the wiped node's replicas.
	"snapshot-drops-entry": {wipe},
	// A leader lease outlives its time: a paused leader resumes and serves
	// reads by its stale lease before it learns of the new term (reads
	// that reach it before the new leader's messages do). Not caught in a
	// 2-minute hunt (2026-11-26: the resumed leader heard of the new term
	// first every time), so scripts/mutants.sh runs the harness test that
	// plays the interleaving instead (TestExpiredLeaseNeverServesStale).
	"lease-ignores-expiry": {pauseLeader},
	// A write refused for space applies anyway: a read, a previous value
	// or a CAS then finds a value no operation in the history wrote (the
	// refusal is left out as a definite failure, history.go).
	"space-refusal-after-propose": {space},
}

func noteFailure(o outcome) {
	failure.why = strings.Join(o.problems(), "; ")
	failure.unchecked = !o.anomalous()
}

// TestMutant hunts the mutant named by CONCORD_MUTANT for
// CONCORD_MUTANT_BUDGET (default 2m) with histories of
// CONCORD_ROBUSTNESS_HISTORY (default 30s), and prints one line: caught (how
// long it took, which history, which check) or not caught.
func TestMutant(t *testing.T) {
	name := os.Getenv("CONCORD_MUTANT")
	if name == "" {
		t.Skip("set CONCORD_MUTANT and CONCORD_TEST_BIN to a -tags mutant binary (make robustness-mutants)")
	}
	kinds, ok := mutantFaults[name]
	if !ok {
		t.Fatalf("unknown mutant %q", name)
	}
	if f := os.Getenv("CONCORD_FAULTS"); f != "" {
		kinds = parseKinds(t, f)
	}
	budget := envDuration(t, "CONCORD_MUTANT_BUDGET", 2*time.Minute)
	each := envDuration(t, "CONCORD_ROBUSTNESS_HISTORY", 30*time.Second)
	start := time.Now()
	for h := 1; time.Since(start) < budget; h++ {
		seed := uint64(1000 + h)
		failure.why, failure.unchecked = "", false
		if t.Run(fmt.Sprintf("seed-%d", seed), func(t *testing.T) { runHistory(t, seed, kinds, each) }) {
			continue
		}
		why := failure.why
		if failure.unchecked {
			t.Logf("history %d (seed %d) failed unchecked, not caught: %s; hunting on", h, seed, why)
			continue
		}
		if why == "" {
			why = "the history did not complete (a node died or the cluster did not heal; see the log)"
		}
		fmt.Printf("mutant: %s CAUGHT in %v (history %d, seed %d, faults %s): %s\n",
			name, time.Since(start).Round(time.Second), h, seed, joinKinds(kinds), why)
		return
	}
	fmt.Printf("mutant: %s NOT CAUGHT in %v (faults %s, %v histories)\n",
		name, time.Since(start).Round(time.Second), joinKinds(kinds), each)
	t.Fail() // a mutant that survives is a failure of the suite
}
