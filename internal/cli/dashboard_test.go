package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// TestDashboardSizeLikeCLI: the dashboard's shard size column
// (internal/httpapi/dashboard/app.js, fmtSize) shows a size as the CLI's
// SIZE column does (shardSize): "-" for 0 or absent, K, M or G with one
// decimal, a tie rounded to the even digit as Go's %.1f does (1280 bytes
// is 1.2K, not JavaScript toFixed's 1.3K). It runs the function from the
// embedded file under Node.js, and skips where there is none (TestDashboard
// in tests/e2e checks the column in a browser).
func TestDashboardSizeLikeCLI(t *testing.T) {
	bin := ""
	for _, name := range []string{"node", "nodejs"} {
		if p, err := exec.LookPath(name); err == nil {
			bin = p
			break
		}
	}
	if bin == "" {
		t.Skip("no Node.js on this machine: the dashboard's size formatter is not checked here")
	}
	src, err := os.ReadFile("../httpapi/dashboard/app.js")
	if err != nil {
		t.Fatal(err)
	}
	num := regexp.MustCompile(`(?m)^const num = .*;$`).Find(src)
	fn := regexp.MustCompile(`(?ms)^function fmtSize\(b\) \{$.*?^\}$`).Find(src)
	if num == nil || fn == nil {
		t.Fatalf("app.js has no num and fmtSize to test (found %q, %q)", num, fn)
	}
	// Ties (1.25 and 1.75 of a unit) and the unit boundaries included.
	sizes := []uint64{0, 1, 1023, 1024, 1280, 1331, 1792, 1<<20 - 1, 1 << 20, 5 << 18, 7 << 18, 12_900_000,
		1<<30 - 1, 1 << 30, 5 << 28, 1 << 40, 5<<40 + 3}
	// protojson writes a uint64 as a string, and leaves a 0 out.
	in := []string{}
	for _, b := range sizes {
		in = append(in, strconv.FormatUint(b, 10))
	}
	arg, _ := json.Marshal(in)
	script := fmt.Sprintf("%s\n%s\nconsole.log(JSON.stringify([fmtSize(undefined), ...%s.map(fmtSize)]));", num, fn, arg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "-e", script).Output()
	if err != nil {
		t.Fatalf("node: %v", err)
	}
	var got []string
	if err := json.Unmarshal(out, &got); err != nil || len(got) != len(sizes)+1 {
		t.Fatalf("node printed %q (%v), want %d sizes", out, err, len(sizes)+1)
	}
	if got[0] != "-" {
		t.Errorf("no approxBytes: dashboard shows %q, want -", got[0])
	}
	for i, b := range sizes {
		if want := shardSize(b); got[i+1] != want {
			t.Errorf("%d bytes: dashboard shows %q, CLI %q", b, got[i+1], want)
		}
	}
}
