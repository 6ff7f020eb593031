package redisapi

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/internal/kv"
)

// TestNoSpaceAnswers: while the space alarm is on, a write that adds data
// is answered -NOSPACE with the node's words (not AMBIGUOUS: nothing was
// proposed), while a DEL pipelined with it on the same shard still runs
// (the chain's batch, refused whole, runs each command alone) and a GET
// reads; inside MULTI such a command is refused as it is queued and EXEC
// answers EXECABORT, as Redis does for -OOM.
func TestNoSpaceAnswers(t *testing.T) {
	const reason = "node 2 has 800.0 MiB free, under its --reserve-disk-bytes of 1.0 GiB"
	f := &fakeKV{noSpace: status.Error(codes.ResourceExhausted, kv.NoSpaceMark+reason)}
	got, log := runPipeline(t, f, "DEL ka", "SET kb v", "GET kb", "INCR kc")
	want := ":1\r\n-NOSPACE " + reason + "\r\n$1\r\nv\r\n-NOSPACE " + reason + "\r\n"
	if got != want {
		t.Fatalf("replies %q, want %q", got, want)
	}
	if !strings.Contains(strings.Join(log, ";"), "batch ka;") {
		t.Fatalf("the DEL did not run alone after its chain was refused: %v", log)
	}

	got, _ = runPipeline(t, f, "MULTI", "DEL ka", "SET kb v", "EXEC")
	want = "+OK\r\n+QUEUED\r\n-NOSPACE " + reason + "\r\n-EXECABORT Transaction discarded because of previous errors.\r\n"
	if got != want {
		t.Fatalf("MULTI replies %q, want %q", got, want)
	}
	got, _ = runPipeline(t, f, "MULTI", "DEL ka", "GET kb", "EXEC")
	if want := "+OK\r\n+QUEUED\r\n+QUEUED\r\n*2\r\n:1\r\n$1\r\nv\r\n"; got != want {
		t.Fatalf("MULTI of a DEL and a GET: %q, want %q", got, want)
	}
}
