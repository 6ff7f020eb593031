package robustness

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// everyMultiForm is one answered multi-key operation of each form each
// protocol sends, with its client id, as the workload records them: a
// history porcupine accepts, in this order.
func everyMultiForm() []porcupine.Operation {
	g := groupKeys("g0")
	vals := multiValues("1", g)
	var ops []porcupine.Operation
	add := func(id int, in kvInput, out kvOutput) {
		n := int64(len(ops)) * 10
		ops = append(ops, porcupine.Operation{ClientId: id, Input: in, Output: out, Call: n, Return: n + 5})
	}
	none := kvOutput{Multi: []kvState{{}, {}, {}}}
	all := kvOutput{Multi: []kvState{has(g[0]), has(g[1]), has(g[2])}}
	add(0, kvInput{Kind: opMGet, Keys: g}, none)
	add(0, kvInput{Kind: opMSet, Keys: g, Values: vals, TTLMs: 60_000}, none)
	add(0, kvInput{Kind: opMSet, Keys: g, Values: vals}, all)
	add(0, kvInput{Kind: opMDel, Keys: g}, all)
	r := respClientBase
	add(r, kvInput{Kind: opMGet, Keys: g}, none)
	add(r, kvInput{Kind: opMGet, Keys: g, Tx: true}, none)
	add(r, kvInput{Kind: opMSet, Keys: g, Values: vals, Blind: true}, kvOutput{})
	add(r, kvInput{Kind: opMSet, Keys: g, Values: vals, Tx: true}, all)
	add(r, kvInput{Kind: opMSet, Keys: g, Values: vals, Tx: true, TTLMs: 60_000}, all)
	add(r, kvInput{Kind: opMDel, Keys: g, CountOnly: true}, kvOutput{N: 3})
	add(r, kvInput{Kind: opMSetNX, Keys: g, Values: vals}, kvOutput{Ok: true})
	return ops
}

// fullCoverage is a coverage with every kind of operation answered over
// both protocols.
func fullCoverage() coverage {
	c := coverageOf(everyMultiForm())
	c.reads, c.writes = [2]int{1, 1}, [2]int{1, 1}
	c.ttlPuts, c.expiredReads = 1, 1
	c.expiry = coverageOf(everyExpiryForm()).expiry
	return c
}

// TestCoverageNeedsEveryMultiForm: a history in which one form of
// multi-key operation (a gRPC batch of puts, RESP's MSETNX, a MULTI/EXEC,
// ...) was never answered checks nothing of that form's atomicity; it
// must fail, naming the form. Ambiguous ones count for nothing.
func TestCoverageNeedsEveryMultiForm(t *testing.T) {
	if r := check(everyMultiForm(), time.Minute).result; r != porcupine.Ok {
		t.Fatalf("the history of every form is %v; the test needs one porcupine passes", r)
	}
	if gaps := fullCoverage().gaps(true); len(gaps) != 0 {
		t.Fatalf("every form answered, yet: %q", gaps)
	}
	all := everyMultiForm()
	for i, o := range all {
		p := overGRPC
		if o.ClientId >= respClientBase {
			p = overRESP
		}
		form := formOf(o.Input.(kvInput), p)
		for _, tc := range []struct {
			how  string
			hist []porcupine.Operation
		}{
			{"missing", append(append([]porcupine.Operation(nil), all[:i]...), all[i+1:]...)},
			{"ambiguous", withOutput(all, i, kvOutput{Unknown: true})},
		} {
			c := coverageOf(tc.hist)
			c.reads, c.writes = [2]int{1, 1}, [2]int{1, 1}
			c.ttlPuts, c.expiredReads = 1, 1
			c.expiry = fullCoverage().expiry
			gaps := c.gaps(true)
			want := fmt.Sprintf("no %s %s was answered", protocolNames[p], form)
			if len(gaps) != 1 || !strings.Contains(gaps[0], want) {
				t.Errorf("%s %s %s: gaps %q, want one saying %q", protocolNames[p], form, tc.how, gaps, want)
			}
		}
	}
}

func withOutput(ops []porcupine.Operation, i int, out kvOutput) []porcupine.Operation {
	ops = append([]porcupine.Operation(nil), ops...)
	ops[i].Output = out
	return ops
}
