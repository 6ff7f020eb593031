package systems

import (
	"os"
	"testing"
	"time"
)

func TestParseStatCPU(t *testing.T) {
	// A command name with a space and a parenthesis, as the kernel allows.
	stat := "4242 (con cord) x) S 1 4242 4242 0 -1 4194560 1234 0 0 0 250 75 0 0 20 0 12 0 100 0 0"
	got, ok := ParseStatCPU(stat)
	if !ok || got != 3250*time.Millisecond {
		t.Fatalf("ParseStatCPU = %v, %v; want 3.25s (325 ticks)", got, ok)
	}
	if _, ok := ParseStatCPU("garbage"); ok {
		t.Fatal("parsed a line without a command name")
	}
}

func TestProcCPUOfSelfGrows(t *testing.T) {
	before, ok := ProcCPU(os.Getpid())
	if !ok {
		t.Skip("no /proc on this system")
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		x := 0
		for i := range 10_000_000 {
			x += i
		}
		_ = x
		if after, _ := ProcCPU(os.Getpid()); after > before {
			return
		}
	}
	t.Fatal("this process's CPU time never grew while it spun")
}

func TestPerKOps(t *testing.T) {
	if got := PerKOps(120*time.Millisecond, 1000); got != 120 {
		t.Fatalf("perKOps = %v, want 120 (ms per 1k ops)", got)
	}
	if PerKOps(time.Second, 0) != 0 {
		t.Fatal("perKOps with no ops must be 0")
	}
}
