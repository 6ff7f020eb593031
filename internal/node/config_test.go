package node

import (
	"strings"
	"testing"
	"time"
)

// TestMaxMovesPerNodeReachesScheduler: --max-moves-per-node sets the
// scheduler's cap, zero keeps the scheduler's default, a negative value is
// refused.
func TestMaxMovesPerNodeReachesScheduler(t *testing.T) {
	for _, tc := range []struct{ flag, want int }{{0, 4}, {1, 1}, {7, 7}} {
		n := &Node{cfg: Config{HeartbeatInterval: time.Second, MaxMovesPerNode: tc.flag}}
		if got := n.schedulerSettings().MaxMovesPerNode; got != tc.want {
			t.Errorf("--max-moves-per-node %d: scheduler cap %d, want %d", tc.flag, got, tc.want)
		}
	}
	c := Config{MaxMovesPerNode: -1}
	if err := c.validate(); err == nil || !strings.Contains(err.Error(), "--max-moves-per-node") {
		t.Fatalf("--max-moves-per-node -1: validate said %v, want an error naming the flag", err)
	}
}
