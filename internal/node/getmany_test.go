package node

import (
	"fmt"
	"testing"
)

// TestReadBeforeFindsTheFirstOccurrence protects GetMany's sharing of a
// repeated key's result: each key maps to its first occurrence (never to
// another key), both for a pipeline-sized batch and past 32 keys, where a
// map replaces the comparisons.
func TestReadBeforeFindsTheFirstOccurrence(t *testing.T) {
	for _, n := range []int{5, 100} {
		keys := make([][]byte, n)
		for i := range keys {
			keys[i] = fmt.Appendf(nil, "k%d", i%3)
		}
		earlier := readBefore(keys)
		for i := range keys {
			want := -1
			if i >= 3 {
				want = i % 3
			}
			if got := earlier(i); got != want {
				t.Fatalf("%d keys: key %d (%s) -> %d, want %d", n, i, keys[i], got, want)
			}
		}
	}
}
