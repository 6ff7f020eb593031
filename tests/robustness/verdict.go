package robustness

import (
	"fmt"

	"github.com/anishathalye/porcupine"
)

// outcome is what the checks found in one history.
type outcome struct {
	result porcupine.CheckResult // porcupine's verdict on the history
	lost   int                   // acknowledged unique writes that did not read back
	// checked is how many acknowledged unique writes were read back.
	checked int
	readErr error // why reading them back stopped, if it did
}

// problems lists why the history fails; none means it passes. A check that
// could not say (porcupine out of time) or that had nothing to look at (no
// acknowledged unique write) is a failure too: the suite's verdict is
// evidence only if every history was actually checked.
func (o outcome) problems() []string {
	var why []string
	switch o.result {
	case porcupine.Illegal:
		why = append(why, "porcupine: not linearizable")
	case porcupine.Unknown:
		why = append(why, "porcupine: inconclusive (the check ran out of time, so the history was not checked)")
	}
	if o.lost > 0 {
		why = append(why, fmt.Sprintf("%d acknowledged writes lost", o.lost))
	}
	if o.readErr != nil {
		why = append(why, "read-back failed: "+o.readErr.Error())
	} else if o.checked == 0 {
		why = append(why, "no acknowledged unique write to read back: the lost-writes check checked nothing")
	}
	return why
}
