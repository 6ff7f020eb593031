package node

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/concord-kv/concord/internal/storage"
)

// TestJoinTokenSurvivesRestart protects join idempotence across a crash: a
// node that restarts before recording its join answer sends the token it
// recorded before its first attempt, not a new one.
func TestJoinTokenSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	token := func() []byte {
		t.Helper()
		eng, err := storage.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer eng.Close()
		n := &Node{eng: eng, log: slog.New(slog.DiscardHandler)}
		tok, err := n.joinToken()
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	first := token()
	if len(first) != 16 || bytes.Equal(first, make([]byte, 16)) {
		t.Fatalf("join token %x: want 16 random bytes", first)
	}
	if again := token(); !bytes.Equal(again, first) {
		t.Fatalf("after a restart the token is %x, was %x", again, first)
	}
	other := t.TempDir()
	dir = other
	if fresh := token(); bytes.Equal(fresh, first) {
		t.Fatalf("two data dirs share join token %x", first)
	}
}

// TestConfigJoinFlags protects the flags' contract: --join and --peers are
// exclusive, join addresses must parse, dead-after must exceed
// suspect-after, the lost-answer hook needs fault injection, and the peer
// wire is one of the two.
func TestConfigJoinFlags(t *testing.T) {
	for _, tc := range []struct {
		mod  func(*Config)
		want string
	}{
		{func(c *Config) { c.Join, c.Peers = []string{"a:1"}, []string{"b:1"} }, "exclusive"},
		{func(c *Config) { c.Join = []string{"no-port"} }, "no-port"},
		{func(c *Config) { c.SuspectAfter, c.DeadAfter = 10e9, 5e9 }, "--dead-after"},
		{func(c *Config) { c.Join, c.TestDropJoinAnswers = []string{"a:1"}, 1 }, "--enable-fault-injection"},
		{func(c *Config) { c.Join = []string{"a:1", "b:2"} }, ""},
		{func(c *Config) { c.PeerWire = "udp" }, "--peer-wire"},
		{func(c *Config) { c.PeerWire = "grpc" }, ""},
	} {
		cfg := DefaultConfig()
		tc.mod(&cfg)
		err := cfg.validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("valid config refused: %v", err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("config error %v, want one naming %q", err, tc.want)
		}
	}
}
