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

// TestSessionTTLBelowRetryWindowRefused: --session-ttl is how long a shard
// keeps a session's last answer, so that a retry gets it instead of
// applying again. A negative or tiny one panicked the node's expiry loop
// (a ticker of TTL/4) after it had started; a short one (seconds) was
// taken and forgot sessions while their clients still retried, which then
// applied twice. Both are refused, naming the flag; the default and the
// minimum pass.
func TestSessionTTLBelowRetryWindowRefused(t *testing.T) {
	for _, ttl := range []time.Duration{-time.Hour, time.Nanosecond, time.Second, minSessionTTL - time.Second} {
		c := Config{SessionTTL: ttl}
		if err := c.validate(); err == nil || !strings.Contains(err.Error(), "--session-ttl") {
			t.Errorf("--session-ttl %v: validate said %v, want an error naming the flag", ttl, err)
		}
	}
	for _, ttl := range []time.Duration{0, minSessionTTL, time.Hour} {
		c := Config{SessionTTL: ttl}
		if err := c.validate(); err != nil {
			t.Errorf("--session-ttl %v: validate said %v, want it taken", ttl, err)
		}
	}
}

// TestAuthTokenChecked: a node refuses to start with a token its wires
// cannot carry (every framed hello refuses one over 4,096 bytes, so the
// node's raft connections to its peers would all fail; gRPC metadata and
// HTTP headers refuse control characters), with an error that does not
// quote the token.
func TestAuthTokenChecked(t *testing.T) {
	for _, tok := range []string{strings.Repeat("x", 4097), "s3c\nret", "s3c ret", "\x00s3cret"} {
		c := DefaultConfig()
		c.AuthToken = tok
		err := c.validate()
		if err == nil || !strings.Contains(err.Error(), "--auth-token-file") {
			t.Errorf("token of %d bytes %.8q: validate said %v, want an error naming the flag", len(tok), tok, err)
			continue
		}
		if strings.Contains(err.Error(), tok) {
			t.Errorf("the error quotes the token: %v", err)
		}
	}
	for _, tok := range []string{"", "s3cret", strings.Repeat("y", 4096)} {
		c := DefaultConfig()
		c.AuthToken = tok
		if err := c.validate(); err != nil {
			t.Errorf("token of %d bytes: %v, want it taken", len(tok), err)
		}
	}
}
