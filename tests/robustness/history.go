package robustness

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/concord-kv/concord/client"
)

// recorder collects a history of operations with monotonic timestamps.
type recorder struct {
	start time.Time

	mu        sync.Mutex
	ops       []porcupine.Operation // guarded by mu
	ambiguous int                   // guarded by mu
	dropped   int                   // guarded by mu: failed, certainly without effect
	// noSpace counts, per protocol (overGRPC, overRESP), the writes of
	// dropped that the space alarm refused (guarded by mu).
	noSpace [2]int
}

func newRecorder() *recorder { return &recorder{start: time.Now()} }

// now is the time since the recorder started, from Go's monotonic clock.
func (r *recorder) now() int64 { return time.Since(r.start).Nanoseconds() }

// begin is now, for an operation about to be called with input in, which
// it stamps with the wall clock first (CallWall: what expiry is judged
// against, ttl.go), so the call's instants bracket the op from before.
func (r *recorder) begin(in *kvInput) int64 {
	in.CallWall = time.Now().UnixNano()
	return r.now()
}

// record adds an operation invoked at call that returned out or err, and
// reports whether it went into the history. An ambiguous mutation (an error
// wrapping client.ErrAmbiguous, from either protocol) never returns, as far
// as the checker knows: it may take effect at any time after its call. Any
// other error means it took no effect (the client only says so when
// certain), so it is left out.
//
// A write the space alarm refused (client.ErrNoSpace without
// ErrAmbiguous: gRPC's ResourceExhausted "no space: ", RESP's -NOSPACE
// and an EXECABORT for it, respclient.go) is such a definite failure, and
// counted apart: the node refused it before proposing, so it must never
// apply. Left out, it is held to that: every value the workload writes is
// unique, so one that applied anyway shows in a read, a previous value or
// a CAS that no operation in the history explains, and porcupine rejects
// the history. (Recorded as ambiguous it would be let off.) A refusal
// after an earlier attempt that may have applied wraps ErrAmbiguous too,
// and is ambiguous.
func (r *recorder) record(clientID int, call int64, in kvInput, out kvOutput, err error) bool {
	ret := r.now()
	out.ReturnWall = time.Now().UnixNano() // after ret: the instants bracket the op
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case err == nil:
	case !in.Kind.isRead() && errors.Is(err, client.ErrAmbiguous):
		out, ret = kvOutput{Unknown: true}, math.MaxInt64
		r.ambiguous++
	case errors.Is(err, client.ErrNoSpace):
		r.noSpace[protocolOf(clientID)]++
		r.dropped++
		return false
	default:
		r.dropped++
		return false
	}
	r.ops = append(r.ops, porcupine.Operation{ClientId: clientID, Input: in, Call: call, Output: out, Return: ret})
	return true
}

// refusedForSpace is how many writes the space alarm refused, per
// protocol.
func (r *recorder) refusedForSpace() [2]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.noSpace
}

func (r *recorder) history() []porcupine.Operation {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]porcupine.Operation(nil), r.ops...)
}

// jsonOp is an operation as keep writes it to history.json.
type jsonOp struct {
	Client int      `json:"client"`
	Call   int64    `json:"call_ns"`
	Return int64    `json:"return_ns"`
	Input  kvInput  `json:"input"`
	Output kvOutput `json:"output"`
}

// readKept reads a history.json that keep wrote.
func readKept(path string) ([]porcupine.Operation, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var in []jsonOp
	if err := json.Unmarshal(b, &in); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	ops := make([]porcupine.Operation, 0, len(in))
	for _, o := range in {
		ops = append(ops, porcupine.Operation{ClientId: o.Client, Call: o.Call, Return: o.Return, Input: o.Input, Output: o.Output})
	}
	return ops, nil
}

// keep writes a failing history into dir, with porcupine's visualisation of
// each key whose check did not pass (history-KEY.html).
func keep(dir string, ops []porcupine.Operation, v verdict) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	out := make([]jsonOp, 0, len(ops))
	for _, o := range ops {
		out = append(out, jsonOp{o.ClientId, o.Call, o.Return, o.Input.(kvInput), o.Output.(kvOutput)})
	}
	b, err := json.MarshalIndent(out, "", " ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "history.json"), b, 0o644); err != nil {
		return err
	}
	for _, k := range v.keys {
		if k.result == porcupine.Ok || !k.hasInfo {
			continue
		}
		if err := porcupine.VisualizePath(kvModel, k.info, filepath.Join(dir, "history-"+fileSafe(k.key)+".html")); err != nil {
			return fmt.Errorf("visualize %s: %w", k.key, err)
		}
	}
	return nil
}

// fileSafe is s with every byte but letters, digits, '-' and '_' made '_'.
func fileSafe(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			b[i] = '_'
		}
	}
	return string(b)
}
