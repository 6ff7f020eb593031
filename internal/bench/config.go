package bench

import (
	"errors"
	"fmt"
	"strconv"
	"time"
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
}

// Workload read ratios. YCSB A/B/C are defined by their read/update split;
// our records are single values, so an update is a whole-value Put.
var workloadReadRatio = map[string]float64{
	"a":   0.5,
	"b":   0.95,
	"c":   1.0,
	"put": 0.0,
	"get": 1.0,
}

// ReadRatioOf returns the read fraction of a named workload.
func ReadRatioOf(workload string) (float64, error) {
	r, ok := workloadReadRatio[workload]
	if !ok {
		return 0, fmt.Errorf("--workload must be a, b, c, put or get, not %q", workload)
	}
	return r, nil
}

// Validate rejects settings a run cannot honour.
func (c *Config) Validate() error {
	switch {
	case c.Target != "concord":
		return fmt.Errorf("--target %q is not supported yet: only concord is (etcd and redis are planned)", c.Target)
	case len(c.Endpoints) == 0:
		return errors.New("--endpoints is empty")
	case c.ReadRatio < 0 || c.ReadRatio > 1:
		return fmt.Errorf("--read-ratio must be between 0 and 1, got %v", c.ReadRatio)
	case c.Keys < 1:
		return fmt.Errorf("--keys must be positive, got %d", c.Keys)
	case c.ValueSize < 0:
		return fmt.Errorf("--value-size must not be negative, got %d", c.ValueSize)
	case c.Clients < 1 || c.Conns < 1:
		return fmt.Errorf("--clients and --conns must be positive, got %d and %d", c.Clients, c.Conns)
	case c.Duration <= 0 && c.Ops <= 0:
		return errors.New("give a positive --duration or --ops")
	case c.Consistency != "linearizable" && c.Consistency != "stale":
		return fmt.Errorf("--consistency must be linearizable or stale, not %q", c.Consistency)
	}
	if _, err := newChooser(c.Distribution, c.Keys); err != nil {
		return err
	}
	// Keys must all have the same length, or --key-size would be a lie.
	if need := 1 + len(strconv.Itoa(c.Keys-1)); c.KeySize < need {
		return fmt.Errorf("--key-size %d is too small for %d keys: need at least %d bytes", c.KeySize, c.Keys, need)
	}
	c.DurationSec = c.Duration.Seconds()
	return nil
}
