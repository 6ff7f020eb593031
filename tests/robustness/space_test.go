package robustness

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/client"
)

// grpcNoSpace is the Go client's error for a write the space alarm refused.
var grpcNoSpace = fmt.Errorf("%w: %w", client.ErrNoSpace,
	status.Error(codes.ResourceExhausted, "no space: node 2 has 0 B free, under its --reserve-disk-bytes of 1.0 GiB"))

// respNoSpace is the Redis port's refusal of the same.
var respNoSpace = respErr("NOSPACE node 2 has 0 B free, under its --reserve-disk-bytes of 1.0 GiB; writes that add data are refused until it has more; deletes and reads still work")

// TestSpaceRefusalIsADefiniteFailure protects what the space fault checks:
// a write refused for space, over either protocol, is counted and left out
// of the history as one that did not happen, not recorded as ambiguous. So
// a refused write whose value a later read finds (the write applied after
// all) makes the history illegal, where as an ambiguous write it would
// pass. A refusal after an attempt that may have applied stays ambiguous.
func TestSpaceRefusalIsADefiniteFailure(t *testing.T) {
	for _, tc := range []struct {
		name   string
		client int
		err    error
	}{
		{"gRPC ErrNoSpace", 0, grpcNoSpace},
		{"RESP -NOSPACE", respClientBase, classify(put("a", "x"), respNoSpace)},
		{"RESP EXECABORT of a queued -NOSPACE", respClientBase, classify(kvInput{Kind: opMSet, Keys: []string{"a"}, Values: []string{"x"}, Tx: true},
			fmt.Errorf("%w: %w (queued: %w)", client.ErrNoSpace, respErr("EXECABORT Transaction discarded because of previous errors."), respNoSpace))},
	} {
		rec := newRecorder()
		rec.record(0, rec.begin(ptr(put("a", "1"))), put("a", "1"), absent, nil)
		in := put("a", "x")
		if rec.record(tc.client, rec.begin(&in), in, kvOutput{}, tc.err) {
			t.Errorf("%s: the refused write went into the history", tc.name)
		}
		if got := rec.refusedForSpace()[protocolOf(tc.client)]; got != 1 || rec.ambiguous != 0 {
			t.Errorf("%s: %d refused for space, %d ambiguous; want 1 and 0", tc.name, got, rec.ambiguous)
		}
		rec.record(0, rec.begin(ptr(get("a"))), get("a"), found("x"), nil) // the refused value, read back
		if r := check(rec.history(), time.Minute).result; r != porcupine.Illegal {
			t.Errorf("%s: a refused write that applied passes the check (%v)", tc.name, r)
		}
	}
	rec := newRecorder()
	in := put("a", "x")
	rec.record(0, rec.begin(&in), in, kvOutput{}, fmt.Errorf("%w: %w", client.ErrAmbiguous, grpcNoSpace))
	if rec.ambiguous != 1 || rec.refusedForSpace() != [2]int{} {
		t.Errorf("a refusal after an attempt that may have applied: %d ambiguous, %v refused; want it ambiguous", rec.ambiguous, rec.refusedForSpace())
	}
}

// TestOnlySpaceRefusalsAreClassifiedSo: an error that is not the space
// alarm's word keeps its classification (ambiguous unless a clear
// refusal), and a read is never marked.
func TestOnlySpaceRefusalsAreClassifiedSo(t *testing.T) {
	for _, tc := range []struct {
		in        kvInput
		err       error
		noSpace   bool
		ambiguous bool
	}{
		{put("a", "x"), respNoSpace, true, false},
		{incr("a"), respNoSpace, true, false},
		{put("a", "x"), respErr("AMBIGUOUS the write may or may not have applied: no space left"), false, true},
		{put("a", "x"), respErr("EXECABORT Transaction discarded because of previous errors."), false, true},
		{put("a", "x"), respErr("ERR syntax error"), false, false},
		{get("a"), respNoSpace, false, false},
	} {
		err := classify(tc.in, tc.err)
		if errors.Is(err, client.ErrNoSpace) != tc.noSpace || errors.Is(err, client.ErrAmbiguous) != tc.ambiguous {
			t.Errorf("%s %v: classified %v; want no space %v, ambiguous %v", tc.in.Kind, tc.err, err, tc.noSpace, tc.ambiguous)
		}
	}
}

// TestExecAbortForSpaceIsARefusal runs a MULTI/EXEC through doTx against
// a server on 127.0.0.1 that answers as a node under the space alarm does
// (the first SET refused as queued, EXEC aborted): the error wraps
// client.ErrNoSpace, and the same EXECABORT without a queued -NOSPACE
// does not.
func TestExecAbortForSpaceIsARefusal(t *testing.T) {
	for _, queued := range []string{"-" + respNoSpace.Error(), "-ERR some other refusal"} {
		addr := fakeExecAbort(t, queued)
		node := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DisableIdentity: true})
		in := kvInput{Kind: opMSet, Keys: []string{"{g}a", "{g}b"}, Values: []string{"1", "2"}, Tx: true}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := doTx(ctx, node, in)
		cancel()
		node.Close()
		if err == nil || !strings.Contains(err.Error(), "EXECABORT") {
			t.Fatalf("queued %q: doTx answered %v; want EXECABORT", queued, err)
		}
		if want := strings.HasPrefix(queued, "-NOSPACE"); errors.Is(classify(in, err), client.ErrNoSpace) != want {
			t.Errorf("queued %q: %v; refused for space %v, want %v", queued, classify(in, err), !want, want)
		}
	}
}

// fakeExecAbort serves one connection: MULTI +OK, the first SET the queued
// answer, the others +QUEUED, EXEC -EXECABORT, anything else (the client's
// HELLO) an unknown command.
func fakeExecAbort(t *testing.T, queued string) string {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	go func() {
		c, err := lis.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		r := bufio.NewReader(c)
		first := true
		for {
			args, err := readArray(r)
			if err != nil {
				return
			}
			var reply string
			switch strings.ToUpper(args[0]) {
			case "MULTI":
				reply = "+OK"
			case "EXEC":
				reply = "-EXECABORT Transaction discarded because of previous errors."
			case "SET":
				reply = "+QUEUED"
				if first {
					reply, first = queued, false
				}
			default: // HELLO, as the client connects
				reply = "-ERR unknown command '" + args[0] + "'"
			}
			if _, err := c.Write([]byte(reply + "\r\n")); err != nil {
				return
			}
		}
	}()
	return lis.Addr().String()
}

// readArray reads one RESP array of bulk strings, as clients send commands.
func readArray(r *bufio.Reader) ([]string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	var n int
	if _, err := fmt.Sscanf(line, "*%d\r\n", &n); err != nil {
		return nil, err
	}
	args := make([]string, n)
	for i := range args {
		if _, err := r.ReadString('\n'); err != nil { // $len
			return nil, err
		}
		s, err := r.ReadString('\n')
		if err != nil {
			return nil, err
		}
		args[i] = strings.TrimSuffix(s, "\r\n")
	}
	return args, nil
}

// TestCoverageNeedsSpaceRefusals: a history the space fault ran in fails
// unless each protocol had a write refused for space (else the refusals'
// classification was not put to the test), and one without the fault
// needs none.
func TestCoverageNeedsSpaceRefusals(t *testing.T) {
	for _, tc := range []struct {
		name    string
		faults  int
		noSpace [2]int
		fail    bool
	}{
		{"no space fault", 0, [2]int{}, false},
		{"refusals over both protocols", 2, [2]int{5, 3}, false},
		{"no RESP refusal", 2, [2]int{5, 0}, true},
		{"no refusal at all", 1, [2]int{}, true},
	} {
		c := fullCoverage()
		c.spaceFaults, c.noSpace = tc.faults, tc.noSpace
		o := outcome{faults: 1, result: porcupine.Ok, checked: 1, cover: c, resp: true}
		if got := len(o.problems()) > 0; got != tc.fail {
			t.Errorf("%s: fails = %v (%q), want %v", tc.name, got, o.problems(), tc.fail)
		}
	}
}

func ptr(in kvInput) *kvInput { return &in }

// respErr is an error reply as go-redis returns one (a redis.Error).
type respErr string

func (e respErr) Error() string { return string(e) }
func (respErr) RedisError()     {}

// TestClustersRunTheSpaceGuard protects the space fault's precondition:
// test clusters run with the guard off unless asked (testcluster), and a
// node whose guard is off refuses Admin.DiskLow, which failed every
// history that drew the space fault.
func TestClustersRunTheSpaceGuard(t *testing.T) {
	for _, kinds := range [][]faultKind{{space}, parseKinds(t, classicKinds), parseKinds(t, allFaultKinds)} {
		if r := clusterOptions(kinds).ReserveDiskBytes; r <= 0 {
			t.Errorf("clusterOptions(%v).ReserveDiskBytes = %d; want a reserve that turns the guard on", kinds, r)
		}
	}
}
