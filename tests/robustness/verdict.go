package robustness

import (
	"fmt"

	"github.com/anishathalye/porcupine"
)

// outcome is what the checks found in one history.
type outcome struct {
	result porcupine.CheckResult // porcupine's verdict on the history
	faults int                   // faults injected while the workload ran
	lost   int                   // acknowledged unique writes that did not read back
	// checked is how many acknowledged unique writes were read back.
	checked int
	readErr error // why reading them back stopped, if it did
	// cover is what the history holds that constrains the checker, and
	// resp whether RESP clients ran (so RESP operations are due in it).
	cover coverage
	resp  bool
}

// problems lists why the history fails; none means it passes. A check that
// had nothing to look at (no acknowledged unique write, no fault) is a
// failure too: such a history is no evidence. A porcupine check that ran
// out of time is not a failure (it is a limit of the checker, hit now and
// then by a history with many ambiguous writes, and would make the suite
// fail at random), but it is no pass either: the summary line says how
// many histories went unchecked, beside the verdict.
func (o outcome) problems() []string {
	var why []string
	if o.faults == 0 {
		why = append(why, "no fault was injected: the history says nothing of faults")
	}
	if o.result == porcupine.Illegal {
		why = append(why, "porcupine: not linearizable")
	}
	if o.lost > 0 {
		why = append(why, fmt.Sprintf("%d acknowledged writes lost", o.lost))
	}
	if o.readErr != nil {
		why = append(why, "read-back failed: "+o.readErr.Error())
	} else if o.checked == 0 {
		why = append(why, "no acknowledged unique write to read back: the lost-writes check checked nothing")
	}
	why = append(why, o.cover.gaps(o.resp)...)
	return why
}

// anomalous reports whether the history shows the product misbehaving (not
// linearizable, a write lost, a read-back that failed on a healed cluster)
// rather than only going unchecked: the difference between a mutant caught
// and a history that says nothing.
func (o outcome) anomalous() bool {
	return o.result == porcupine.Illegal || o.lost > 0 || o.readErr != nil
}

// protocol indexes coverage's counts.
const (
	overGRPC = iota
	overRESP
)

var protocolNames = [...]string{overGRPC: "gRPC", overRESP: "RESP"}

// coverage counts, per protocol, a history's operations that the checker
// can hold to something: reads that returned a value (or absence), and
// mutations that were answered. Ambiguous mutations constrain nothing, and
// failed operations are not in the history.
type coverage struct {
	reads, writes [2]int
	multi         [2]map[string]int // multi-key ops per form (multi.go)
	expiry        [2]map[string]int // expiry commands per form (expire.go)
	// ttlPuts are answered puts with a TTL; expiredReads, reads that
	// certainly observed a TTL run out (ttl.go, expiryCounts).
	ttlPuts, expiredReads int
	// spaceFaults is how many space faults the nemesis held for their
	// whole hold time (2 s at least), and noSpace how many writes, per
	// protocol, the space alarm refused (recorder.refusedForSpace; they
	// are not in the history).
	spaceFaults int
	noSpace     [2]int
}

// protocolOf is the protocol porcupine client id speaks.
func protocolOf(clientID int) int {
	if clientID >= respClientBase {
		return overRESP
	}
	return overGRPC
}

func coverageOf(ops []porcupine.Operation) coverage {
	var c coverage
	c.ttlPuts, c.expiredReads = expiryCounts(ops)
	for _, o := range ops {
		p := protocolOf(o.ClientId)
		in := o.Input.(kvInput)
		c.countExpiry(p, in, o.Output.(kvOutput))
		switch {
		case len(in.Keys) > 0:
			c.countMulti(p, in, o.Output.(kvOutput))
		case in.Kind == opGet:
			c.reads[p]++
		case !o.Output.(kvOutput).Unknown:
			c.writes[p]++
		}
	}
	return c
}

// gaps says which protocol's reads or writes the history has none of: a
// history whose reads all failed, or whose writes all were refused or
// ambiguous, passes porcupine while checking nothing of that protocol.
func (c coverage) gaps(resp bool) []string {
	protocols := []int{overGRPC}
	if resp {
		protocols = append(protocols, overRESP)
	}
	var why []string
	for _, p := range protocols {
		if c.reads[p] == 0 {
			why = append(why, fmt.Sprintf("no %s read succeeded: the history checks none", protocolNames[p]))
		}
		if c.writes[p] == 0 {
			why = append(why, fmt.Sprintf("no %s mutation was answered: the history checks none", protocolNames[p]))
		}
		why = append(why, c.multiGaps(p)...)
		why = append(why, c.expiryGaps(p)...)
		if c.spaceFaults > 0 && c.noSpace[p] == 0 {
			// Then the refusals' classification (recorder.record) was
			// never put to the test: the alarm did not reach this
			// protocol's writes, or their refusals were not recognised.
			why = append(why, fmt.Sprintf("the space fault was held %d times but no %s write was refused for space: the history checks no refusal",
				c.spaceFaults, protocolNames[p]))
		}
	}
	if c.expiredReads == 0 {
		why = append(why, "no read observed a TTL run out: the history checks no key expiry")
	}
	return why
}
