package kv

import (
	"fmt"
	"testing"

	"github.com/concord-kv/concord/api/concordpb"
)

// BenchmarkAbsorb: the leader's cost of absorption per merged command of
// 1,000 blind PUTs, all of one key (everything but the last dropped) or
// of distinct keys (nothing dropped).
func BenchmarkAbsorb(b *testing.B) {
	for _, shape := range []string{"one-key", "distinct"} {
		ops := make([]*concordpb.Op, 1000)
		for i := range ops {
			k := "key:__rand_int__"
			if shape == "distinct" {
				k = fmt.Sprintf("key:%012d", i)
			}
			ops[i] = &concordpb.Op{Type: concordpb.OpType_OP_PUT, Key: []byte(k), Value: make([]byte, 256)}
		}
		b.Run(shape, func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				kept, dropped := Absorb(ops)
				_ = Expand(make([]*concordpb.OpResult, len(kept)), dropped)
			}
		})
	}
}
