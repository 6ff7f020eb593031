package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
)

// resolveArgs parses args as the bench command's flags and resolves them.
func resolveArgs(t *testing.T, args ...string) (benchFlags, error) {
	t.Helper()
	t.Setenv("CONCORD_ENDPOINTS", "")
	var f benchFlags
	cmd := &cobra.Command{Use: "bench"}
	addBenchFlags(cmd, &f)
	if err := cmd.Flags().Parse(args); err != nil {
		t.Fatal(err)
	}
	return f, f.resolve(cmd)
}

func TestBenchFlagDefaults(t *testing.T) {
	f, err := resolveArgs(t)
	if err != nil {
		t.Fatal(err)
	}
	c := f.cfg
	if c.Workload != "a" || c.ReadRatio != 0.5 || !c.Preload || c.Duration != 10*time.Second || c.Ops != 0 {
		t.Errorf("defaults: %+v", c)
	}
	if len(c.Endpoints) != 1 || c.Endpoints[0] != "127.0.0.1:7001" {
		t.Errorf("endpoints %v", c.Endpoints)
	}
}

func TestBenchFlagInteractions(t *testing.T) {
	f, err := resolveArgs(t, "--workload", "put", "--ops", "500", "--endpoints", "a:1, b:2")
	if err != nil {
		t.Fatal(err)
	}
	// put-only: nothing to read, so no preload; --ops alone drops the default duration.
	if f.cfg.ReadRatio != 0 || f.cfg.Preload || f.cfg.Duration != 0 || f.cfg.Ops != 500 || len(f.cfg.Endpoints) != 2 {
		t.Errorf("put --ops: %+v", f.cfg)
	}
	f, err = resolveArgs(t, "--read-ratio", "0.8")
	if err != nil {
		t.Fatal(err)
	}
	if f.cfg.ReadRatio != 0.8 || f.cfg.Workload != "custom" || !f.cfg.Preload {
		t.Errorf("--read-ratio: %+v", f.cfg)
	}
	f, err = resolveArgs(t, "--workload", "c", "--preload=false")
	if err != nil || f.cfg.Preload {
		t.Errorf("explicit --preload=false ignored: %+v, %v", f.cfg, err)
	}
}

func TestBenchRejects(t *testing.T) {
	for _, args := range [][]string{
		{"--target", "dynamo"},
		{"--target", "redis", "--workload", "e"},
		{"--target", "redis", "--endpoints", "a:1,b:2"},
		{"--workload", "a", "--read-ratio", "0.3"},
		{"--workload", "z"},
		{"--distribution", "normal"},
		{"--output", "yaml"},
		{"--consistency", "weak"},
	} {
		if _, err := resolveArgs(t, args...); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
	_, err := resolveArgs(t, "--target", "redis", "--workload", "e")
	if err == nil || !strings.Contains(err.Error(), "no ordered range read") {
		t.Errorf("--target redis, workload e: %v", err)
	}
}

func TestBenchWorkloadDefaults(t *testing.T) {
	f, err := resolveArgs(t, "--target", "etcd", "--workload", "d")
	if err != nil {
		t.Fatal(err)
	}
	if f.cfg.Distribution != "latest" || !f.cfg.Preload || f.cfg.ReadRatio != 0.95 {
		t.Errorf("workload d: %+v", f.cfg)
	}
	f, err = resolveArgs(t, "--workload", "e", "--distribution", "zipfian")
	if err != nil {
		t.Fatal(err)
	}
	if f.cfg.Distribution != "zipfian" || !f.cfg.Preload || f.cfg.ReadRatio != 0 {
		t.Errorf("workload e: scans need a preload and keep the given distribution: %+v", f.cfg)
	}
}
