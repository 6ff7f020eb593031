package bench

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/concord-kv/concord/client"
)

// Config describes one benchmark run. The JSON form is echoed in the result
// so a recorded figure carries the settings that produced it.
type Config struct {
	Target       string        `json:"target"`
	Endpoints    []string      `json:"endpoints"`
	Workload     string        `json:"workload"`
	ReadRatio    float64       `json:"read_ratio"`
	Distribution string        `json:"distribution"`
	Keys         int           `json:"keys"`
	KeySize      int           `json:"key_size"`
	ValueSize    int           `json:"value_size"`
	Clients      int           `json:"clients"`
	Conns        int           `json:"conns"`
	Duration     time.Duration `json:"-"`
	DurationSec  float64       `json:"duration_limit_sec,omitempty"`
	Ops          int64         `json:"ops_limit,omitempty"`
	Consistency  string        `json:"consistency"`
	Preload      bool          `json:"preload"`
	Seed         uint64        `json:"seed"`
	Mix          Mix           `json:"mix"`
	// Concord is the Go client's TLS and token settings for --target
	// concord (its Endpoints are Endpoints above); not reported.
	Concord client.Options `json:"-"`
}

// Targets --target accepts.
var targets = map[string]bool{"concord": true, "etcd": true, "redis": true}

// Normalize fills what the flags leave implicit: the operation mix (from
// --workload, or from --read-ratio when the workload is "custom"), the
// read ratio it implies, and the workload's default distribution.
func (c *Config) Normalize() error {
	if c.Workload == "custom" {
		if c.ReadRatio < 0 || c.ReadRatio > 1 {
			return fmt.Errorf("--read-ratio must be between 0 and 1, got %v", c.ReadRatio)
		}
		c.Mix = ReadsOnly(c.ReadRatio)
	} else {
		m, err := MixOf(c.Workload)
		if err != nil {
			return err
		}
		c.Mix = m
	}
	c.ReadRatio = c.Mix[opRead]
	if c.Distribution == "" {
		c.Distribution = DefaultDistribution(c.Workload)
	}
	return nil
}

// NeedsPreload reports whether the mix reads keys that must exist first.
func (c *Config) NeedsPreload() bool { return c.Mix.reads() }

// MaxClients bounds --clients. Each goroutine holds its own latency
// histograms (about 0.7 MB), allocated before the run starts: --clients
// 1000000000 took all the memory of the machine (17 GB before it was
// killed) instead of failing. Ten thousand is ten times the most any
// documented run uses, and the node's default connection caps.
const MaxClients = 10000

// Validate rejects settings a run cannot honour.
func (c *Config) Validate() error {
	if err := c.Normalize(); err != nil {
		return err
	}
	switch {
	case !targets[c.Target]:
		return fmt.Errorf("--target must be concord, etcd or redis, not %q", c.Target)
	case c.Target == "redis" && c.Mix.has(opScan):
		return errors.New("--target redis cannot run scans (workload e): Redis has no ordered range read over string keys")
	case c.Target == "redis" && len(c.Endpoints) != 1:
		return fmt.Errorf("--target redis takes one endpoint (a single Redis server), got %d", len(c.Endpoints))
	case len(c.Endpoints) == 0:
		return errors.New("--endpoints is empty")
	case c.Mix.valid() != nil:
		return c.Mix.valid()
	case c.Keys < 1:
		return fmt.Errorf("--keys must be positive, got %d", c.Keys)
	case c.ValueSize < 0:
		return fmt.Errorf("--value-size must not be negative, got %d", c.ValueSize)
	case c.Clients < 1 || c.Conns < 1:
		return fmt.Errorf("--clients and --conns must be positive, got %d and %d", c.Clients, c.Conns)
	case c.Clients > MaxClients:
		return fmt.Errorf("--clients must be at most %d, got %d", MaxClients, c.Clients)
	case c.Conns > c.Clients:
		return fmt.Errorf("--conns (%d) must not exceed --clients (%d): a connection set no goroutine uses only loads the nodes", c.Conns, c.Clients)
	case c.Duration <= 0 && c.Ops <= 0:
		return errors.New("give a positive --duration or --ops")
	case c.Consistency != "linearizable" && c.Consistency != "stale":
		return fmt.Errorf("--consistency must be linearizable or stale, not %q", c.Consistency)
	}
	if _, err := newChooser(c.Distribution, newKeyspace(c.Keys)); err != nil {
		return err
	}
	// Keys must all have the same length, or --key-size would be a lie.
	if need := 1 + len(strconv.Itoa(c.Keys-1)); c.KeySize < need {
		return fmt.Errorf("--key-size %d is too small for %d keys: need at least %d bytes", c.KeySize, c.Keys, need)
	}
	c.DurationSec = c.Duration.Seconds()
	return nil
}
