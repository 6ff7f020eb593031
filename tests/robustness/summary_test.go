package robustness

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// fakeHistoryEnv makes TestHistoryFailingBeforeItsChecks, in a child test
// binary, a history that fails before finish runs.
const fakeHistoryEnv = "CONCORD_ROBUSTNESS_FAKE_FAILED_HISTORY"

// TestHistoryFailingBeforeItsChecks is the child's history: counted, then
// failed the way a nemesis heal that does not settle fails one.
func TestHistoryFailingBeforeItsChecks(t *testing.T) {
	if os.Getenv(fakeHistoryEnv) == "" {
		t.Skip("run by TestSummaryCountsEveryFailedHistory in a child process")
	}
	countHistory(t)
	t.Fatalf("simulated: the cluster did not become healthy in time")
}

// TestSummaryCountsEveryFailedHistory runs this test binary again with one
// history that fails before its checks, and reads the summary line it
// prints: the verdict must be FAIL. (It was PASS, or no line at all: only
// finish counted histories, so one that died in the nemesis was left out.)
func TestSummaryCountsEveryFailedHistory(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run", "^TestHistoryFailingBeforeItsChecks$", "-test.count=1")
	cmd.Env = append(os.Environ(), fakeHistoryEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("the child test binary passed; its history was meant to fail:\n%s", out)
	}
	var line string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "robustness: ") {
			line = l
		}
	}
	if !strings.Contains(line, "1 histories") || !strings.Contains(line, "verdict: FAIL (1 histories)") {
		t.Fatalf("summary line %q, want 1 history and verdict FAIL (1 histories); the child printed:\n%s", line, out)
	}
}
