package storage

import (
	"fmt"
	"testing"

	"github.com/concord-kv/concord/internal/keys"
)

// BenchmarkPointReadFullMemtable reads one user key through a view while
// the memtable holds n other entries (raft log entries of busy shards, as
// under a write load): the cost of the memtable search per read.
func BenchmarkPointReadFullMemtable(b *testing.B) {
	for _, n := range []int{0, 10_000, 100_000} {
		b.Run(fmt.Sprintf("entries=%d", n), func(b *testing.B) {
			e, err := Open(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			val := make([]byte, 300)
			batch := e.db.NewBatch()
			for i := range n {
				_ = batch.Set(keys.User(uint64(i%16), []byte(fmt.Sprintf("log-%09d", i))), val, nil)
			}
			if err := batch.Commit(nil); err != nil {
				b.Fatal(err)
			}
			k := keys.User(7, []byte("k"))
			if err := e.db.Set(k, []byte("v"), nil); err != nil {
				b.Fatal(err)
			}
			v, err := e.NewReadView(1 << 30)
			if err != nil {
				b.Fatal(err)
			}
			defer v.Release()
			get := func(r Reader) error {
				_, closer, err := r.Get(k)
				if err == nil {
					err = closer.Close()
				}
				return err
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if err := v.Read(get); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
