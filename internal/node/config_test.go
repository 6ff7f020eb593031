package node

import (
	"errors"
	"io"
	"math"
	"net"
	"strconv"
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

// TestLearnerTimeoutReachesScheduler: --learner-timeout sets the
// scheduler's LearnerTimeout (stuck-learner removal, and how long the node
// a stuck learner left is avoided for its shard), zero keeps the default
// (30 min); a value below the step timeout (10 s) is refused naming the
// flag. The default passes with a heartbeat of an hour (tests use one).
func TestLearnerTimeoutReachesScheduler(t *testing.T) {
	for _, tc := range []struct{ flag, want time.Duration }{{0, 30 * time.Minute}, {time.Minute, time.Minute}, {2 * time.Hour, 2 * time.Hour}} {
		n := &Node{cfg: Config{HeartbeatInterval: time.Second, LearnerTimeout: tc.flag}}
		if got := n.schedulerSettings().LearnerTimeout; got != tc.want {
			t.Errorf("--learner-timeout %v: scheduler's %v, want %v", tc.flag, got, tc.want)
		}
	}
	c := Config{}
	if err := c.validate(); err != nil || c.LearnerTimeout != 30*time.Minute {
		t.Fatalf("no --learner-timeout: validate said %v and set %v, want the default 30m", err, c.LearnerTimeout)
	}
	for _, tc := range []struct {
		hb, v time.Duration
		ok    bool
	}{
		{0, -time.Minute, false}, {0, time.Nanosecond, false}, {0, 10*time.Second - 1, false}, {0, 10 * time.Second, true},
		{time.Hour, 0, true},
	} {
		c := Config{HeartbeatInterval: tc.hb, LearnerTimeout: tc.v}
		err := c.validate()
		if tc.ok && err != nil {
			t.Errorf("--learner-timeout %v (heartbeat %v): validate said %v, want it taken", tc.v, tc.hb, err)
		}
		if !tc.ok && (err == nil || !strings.Contains(err.Error(), "--learner-timeout must be at least")) {
			t.Errorf("--learner-timeout %v (heartbeat %v): validate said %v, want an error naming the flag", tc.v, tc.hb, err)
		}
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

// TestRedisMaxClientsNegativeRefused: --redis-max-clients below zero is
// refused at start, naming the flag; zero (the default, 10,000) passes.
func TestRedisMaxClientsNegativeRefused(t *testing.T) {
	c := Config{RedisMaxClients: -1}
	if err := c.validate(); err == nil || !strings.Contains(err.Error(), "--redis-max-clients") {
		t.Fatalf("--redis-max-clients -1: validate said %v, want an error naming the flag", err)
	}
	c = Config{RedisMaxClients: 0}
	if err := c.validate(); err != nil && strings.Contains(err.Error(), "--redis-max-clients") {
		t.Fatalf("--redis-max-clients 0: %v", err)
	}
}

// TestRedisMaxClientsReachesServer: --redis-max-clients bounds the node's
// RESP connections on its port: past it, Redis's error, and the node's
// maxclients says the figure.
func TestRedisMaxClientsReachesServer(t *testing.T) {
	n := startSolo(t, func(c *Config) { c.RedisMaxClients = 1 })
	// ask sends cmd on a new connection, which stays open, and reads as
	// many bytes as want has.
	ask := func(cmd, want string) {
		c, err := net.DialTimeout("tcp", n.Addr(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write([]byte(cmd)); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(want))
		k, err := io.ReadFull(c, got)
		if string(got[:k]) != want {
			t.Fatalf("%q: %q, %v; want %q", cmd, got[:k], err, want)
		}
	}
	ask("*3\r\n$6\r\nCONFIG\r\n$3\r\nGET\r\n$10\r\nmaxclients\r\n", "*2\r\n$10\r\nmaxclients\r\n$1\r\n1\r\n")
	ask("PING\r\n", "-ERR max number of clients reached\r\n")
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

// TestGRPCMaxConnsReachesServer: --grpc-max-conns bounds the gRPC
// connections on the node's port: with a cap of 2, of 5 connections that
// open as HTTP/2 does at least 3 are closed by the node at once (the
// others may include the node's own). Before, gRPC kept every one.
func TestGRPCMaxConnsReachesServer(t *testing.T) {
	n := startSolo(t, func(c *Config) { c.GRPCMaxConns = 2 })
	closed := make(chan struct{}, 5)
	for range 5 {
		c, err := net.DialTimeout("tcp", n.Addr(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := c.Write([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		go func() {
			// The node's SETTINGS, then, past the cap, the end.
			if _, err := io.Copy(io.Discard, c); err == nil || !isTimeout(err) {
				closed <- struct{}{}
			}
		}()
	}
	for i := range 3 {
		select {
		case <-closed:
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of 5 gRPC connections closed, want at least 3 past a cap of 2", i)
		}
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestGRPCMaxConnsNegativeRefused: --grpc-max-conns below zero is refused
// at start, naming the flag.
func TestGRPCMaxConnsNegativeRefused(t *testing.T) {
	c := Config{GRPCMaxConns: -1}
	if err := c.validate(); err == nil || !strings.Contains(err.Error(), "--grpc-max-conns") {
		t.Fatalf("--grpc-max-conns -1: validate said %v, want an error naming the flag", err)
	}
}

// TestGRPCIdleTimesNegativeRefused: a negative GRPCMaxConnIdle or
// GRPCEvictIdleAfter is refused at start, not taken as "at once".
func TestGRPCIdleTimesNegativeRefused(t *testing.T) {
	for _, c := range []Config{{GRPCMaxConnIdle: -time.Second}, {GRPCEvictIdleAfter: -time.Second}} {
		if err := c.validate(); err == nil || !strings.Contains(err.Error(), "gRPC idle times") {
			t.Errorf("%v, %v: validate said %v, want an error about the idle times", c.GRPCMaxConnIdle, c.GRPCEvictIdleAfter, err)
		}
	}
}

// TestAvailableFlagsChecked: a negative --available-timeout or
// --max-hint-bytes is refused at start, naming the flag; zero takes the
// timeout's default (1 s) and keeps a bound of 0 (no tentative writes).
func TestAvailableFlagsChecked(t *testing.T) {
	for flag, c := range map[string]Config{"--available-timeout": {AvailableTimeout: -time.Second}, "--max-hint-bytes": {MaxHintBytes: -1}} {
		if err := c.validate(); err == nil || !strings.Contains(err.Error(), flag) {
			t.Errorf("%s negative: validate said %v, want an error naming the flag", flag, err)
		}
	}
	c := Config{}
	if err := c.validate(); err != nil || c.AvailableTimeout != time.Second || c.MaxHintBytes != 0 {
		t.Fatalf("zero config: %v, timeout %v, max hint bytes %d", err, c.AvailableTimeout, c.MaxHintBytes)
	}
	if d := DefaultConfig(); d.MaxHintBytes != 256<<20 || d.AvailableTimeout != time.Second {
		t.Fatalf("defaults: %v, %d", d.AvailableTimeout, d.MaxHintBytes)
	}
}

// TestMaxConcurrentStreamsChecked: a negative --max-concurrent-streams, or
// one past what HTTP/2 can announce (uint32), is refused naming the flag;
// 0 (a Config that says nothing) takes DefaultMaxConcurrentStreams, never
// grpc-go's "unlimited"; a positive one is kept.
func TestMaxConcurrentStreamsChecked(t *testing.T) {
	if strconv.IntSize < 64 {
		t.Skip("an int cannot pass uint32 here")
	}
	var wide int64 = math.MaxUint32 // a variable: this file compiles where int is 32 bits
	most := int(wide)
	for _, v := range []int{-1, most + 1} {
		c := Config{MaxConcurrentStreams: v}
		if err := c.validate(); err == nil || !strings.Contains(err.Error(), "--max-concurrent-streams") {
			t.Errorf("--max-concurrent-streams %d: validate said %v, want an error naming the flag", v, err)
		}
	}
	for _, tc := range []struct{ given, want int }{{0, DefaultMaxConcurrentStreams}, {1, 1}, {most, most}} {
		c := Config{MaxConcurrentStreams: tc.given}
		if err := c.validate(); err != nil && strings.Contains(err.Error(), "--max-concurrent-streams") {
			t.Errorf("--max-concurrent-streams %d: %v", tc.given, err)
		}
		if c.MaxConcurrentStreams != tc.want {
			t.Errorf("--max-concurrent-streams %d: validate left %d, want %d", tc.given, c.MaxConcurrentStreams, tc.want)
		}
	}
}
