package node

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestNegativeDurationsRefused: a negative --session-ttl or --tick-interval
// (or heartbeat or repair interval) is refused by New with an error naming
// it, before the data dir is created. Before, --session-ttl=-1s passed,
// bootstrapped the data dir and then crashed the process (time.NewTicker
// panics on a non-positive interval), and --tick-interval=-1s bootstrapped
// the data dir before multiraft refused it.
func TestNegativeDurationsRefused(t *testing.T) {
	for _, tc := range []struct {
		mod  func(c *Config)
		want string
	}{
		{func(c *Config) { c.SessionTTL = -time.Second }, "--session-ttl"},
		{func(c *Config) { c.TickInterval = -time.Second }, "--tick-interval"},
		{func(c *Config) { c.HeartbeatInterval = -time.Second }, "heartbeat interval"},
		{func(c *Config) { c.RepairInterval = -time.Second }, "repair interval"},
	} {
		cfg := DefaultConfig()
		cfg.Addr = "127.0.0.1:0"
		cfg.Peers = nil
		cfg.DataDir = filepath.Join(t.TempDir(), "data")
		cfg.Logger = slog.New(slog.DiscardHandler)
		tc.mod(&cfg)
		_, err := New(cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New: err = %v, want one naming %q", err, tc.want)
		}
		if _, err := os.Stat(cfg.DataDir); !os.IsNotExist(err) {
			t.Errorf("%s: the data dir was created (stat: %v)", tc.want, err)
		}
	}
}

// TestMaxKeyBytesCapped: --max-key-bytes above 64 KiB is refused by New
// with an error naming it, before the data dir is created (before: any
// size was taken); 64 KiB itself is valid.
func TestMaxKeyBytesCapped(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Addr = "127.0.0.1:0"
	cfg.Peers = nil
	cfg.DataDir = filepath.Join(t.TempDir(), "data")
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.MaxKeyBytes = 64<<10 + 1
	if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), "--max-key-bytes above 65536") {
		t.Fatalf("New with --max-key-bytes=65537: err = %v, want one naming the flag and its cap", err)
	}
	if _, err := os.Stat(cfg.DataDir); !os.IsNotExist(err) {
		t.Fatalf("the data dir was created (stat: %v)", err)
	}
	cfg.MaxKeyBytes = 64 << 10
	if err := cfg.validate(); err != nil {
		t.Fatalf("--max-key-bytes=65536: %v", err)
	}
}
