package bench

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
)

// Operation types, indexes into per-type arrays.
const (
	opRead   = iota // Get of an existing key
	opUpdate        // whole-value Put of an existing key
	opInsert        // Put of a new key past the loaded range (YCSB D, E)
	opScan          // ordered range read of 1..MaxScanLength keys (YCSB E)
	opRMW           // Get then Put of the same key, timed as one (YCSB F)
	numOps
)

var opNames = [numOps]string{"read", "update", "insert", "scan", "rmw"}

// MaxScanLength is YCSB's default maxscanlength; scan lengths are uniform
// in [1, MaxScanLength], as in YCSB's default scanlengthdistribution.
const MaxScanLength = 100

// Mix is the fraction of each operation type in a workload; the fractions
// sum to 1.
type Mix [numOps]float64

// workloadMix holds the YCSB core workloads (https://github.com/brianfrankcooper/YCSB/wiki/Core-Workloads)
// and our two single-op loads. Records are single values, so a YCSB
// update is a whole-value Put.
var workloadMix = map[string]Mix{
	"a":   {opRead: 0.5, opUpdate: 0.5},
	"b":   {opRead: 0.95, opUpdate: 0.05},
	"c":   {opRead: 1},
	"d":   {opRead: 0.95, opInsert: 0.05},
	"e":   {opScan: 0.95, opInsert: 0.05},
	"f":   {opRead: 0.5, opRMW: 0.5},
	"put": {opUpdate: 1},
	"get": {opRead: 1},
}

// workloadDistribution is the request distribution a workload uses unless
// --distribution is given: YCSB D reads the latest inserts, the others
// use YCSB's zipfian by default but our default is uniform, as in the
// earlier reports and etcd's benchmark tool.
var workloadDistribution = map[string]string{"d": "latest"}

// MixOf returns the operation mix of a named workload.
func MixOf(workload string) (Mix, error) {
	m, ok := workloadMix[workload]
	if !ok {
		names := make([]string, 0, len(workloadMix))
		for n := range workloadMix {
			names = append(names, n)
		}
		sort.Strings(names)
		return Mix{}, fmt.Errorf("--workload must be one of %s, not %q", strings.Join(names, ", "), workload)
	}
	return m, nil
}

// ReadRatioOf returns the read fraction of a named workload.
func ReadRatioOf(workload string) (float64, error) {
	m, err := MixOf(workload)
	return m[opRead], err
}

// DefaultDistribution returns the distribution a workload uses when none
// is given.
func DefaultDistribution(workload string) string {
	if d, ok := workloadDistribution[workload]; ok {
		return d
	}
	return "uniform"
}

// ReadsOnly builds a read/update mix from --read-ratio.
func ReadsOnly(readRatio float64) Mix { return Mix{opRead: readRatio, opUpdate: 1 - readRatio} }

// has reports whether the mix issues op at all.
func (m Mix) has(op int) bool { return m[op] > 0 }

// reads reports whether the mix reads existing keys, so needs a preload.
func (m Mix) reads() bool { return m[opRead]+m[opScan]+m[opRMW] > 0 }

// pick draws one operation type.
func (m Mix) pick(rng *rand.Rand) int {
	x := rng.Float64()
	for op := range numOps {
		if x < m[op] {
			return op
		}
		x -= m[op]
	}
	// Rounding left x just above the last fraction: the last type used.
	for op := numOps - 1; op >= 0; op-- {
		if m[op] > 0 {
			return op
		}
	}
	return opRead
}

func (m Mix) valid() error {
	sum := 0.0
	for _, f := range m {
		if f < 0 || f > 1 {
			return fmt.Errorf("operation fractions must be between 0 and 1, got %v", m)
		}
		sum += f
	}
	if sum < 0.999 || sum > 1.001 {
		return fmt.Errorf("operation fractions must sum to 1, got %v", sum)
	}
	return nil
}

// MarshalJSON writes the mix as {"read": 0.5, "update": 0.5}, leaving out
// the operation types it does not use.
func (m Mix) MarshalJSON() ([]byte, error) {
	var b strings.Builder
	b.WriteByte('{')
	for op, f := range m {
		if f == 0 {
			continue
		}
		if b.Len() > 1 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%q:%g", opNames[op], f)
	}
	b.WriteByte('}')
	return []byte(b.String()), nil
}
