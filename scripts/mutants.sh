#!/usr/bin/env bash
# Runs each planted bug (internal/mutant) against the checks meant to catch
# it and prints one line per mutant; exits non-zero if any survived.
#
# Most mutants are hunted by the robustness suite (tests/robustness,
# TestMutant) against a -tags mutant binary. A mutant that random faults
# reach only by luck gets a targeted test on the in-process harness
# (internal/multiraft/multiraftest) instead, which plays the one
# interleaving that exposes it: see harness_test_for below.
#
# Usage: scripts/mutants.sh BIN BUDGET MUTANT...   (the Makefile's
# robustness-mutants target passes bin/concord-mutant, MUTANT_BUDGET, MUTANTS)
set -uo pipefail
cd "$(dirname "$0")/.."
bin=$1 budget=$2
shift 2
GO=${GO:-go}
mkdir -p robustness-out

# harness_test_for prints the in-process test that catches mutant $1, if any.
harness_test_for() {
	case $1 in
	forget-vote) echo TestVoteSurvivesRestart ;; # a restarted voter asked again in the same term
	lease-ignores-expiry) echo TestExpiredLeaseNeverServesStale ;; # a cut-off leader's lease outlived by a new leader's write
	esac
}

survived=0
for m in "$@"; do
	log=robustness-out/mutant-$m.log
	test=$(harness_test_for "$m")
	if [ -n "$test" ]; then
		start=$(date +%s)
		CONCORD_MUTANT=$m $GO test -tags mutant -count=1 -v -run "^$test\$" ./internal/multiraft/multiraftest/ >"$log" 2>&1
		rc=$?
		took=$(($(date +%s) - start))
		why=$(grep -E '^\s+[a-z_]+_test\.go:[0-9]+: ' "$log" | grep -vE 'seed=|voted for|answered' | head -1 | sed -E 's/^\s+//')
		if [ $rc -ne 0 ] && grep -q -- "--- FAIL: $test" "$log"; then
			line="mutant: $m CAUGHT in ${took}s (in-process harness, $test): $why"
		else
			line="mutant: $m NOT CAUGHT in ${took}s (in-process harness, $test)"
		fi
	else
		CONCORD_TEST_BIN=$bin CONCORD_MUTANT=$m CONCORD_MUTANT_BUDGET=$budget \
			$GO test -count=1 -timeout 10m -v -run '^TestMutant$' ./tests/robustness >"$log" 2>&1
		line=$(grep -h '^mutant:' "$log")
	fi
	echo "${line:-mutant: $m gave no result (see $log)}"
	case "$line" in *" NOT CAUGHT "* | "") survived=$((survived + 1)) ;; esac
done
echo "robustness-mutants: $survived of $# mutants survived"
[ $survived -eq 0 ]
