package multiraftest_test

import (
	"context"
	"testing"

	"github.com/concord-kv/concord/internal/kv"
	"github.com/concord-kv/concord/internal/multiraft/multiraftest"
	"github.com/concord-kv/concord/internal/storage"
)

// BenchmarkLinearizableGet measures the in-process read path of a leader:
// ReadIndex (a heartbeat round through the in-memory network), then the read
// through the view it returns, from parallel goroutines as RPCs would.
func BenchmarkLinearizableGet(b *testing.B) {
	c := multiraftest.New(b, multiraftest.Options{})
	leader := c.WaitLeader(1)
	c.Put("k", "v")
	h := c.Node(leader).Host
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			v, err := h.ReadIndex(context.Background(), 1)
			if err != nil {
				b.Error(err)
				return
			}
			if err := v.Read(func(r storage.Reader) error {
				_, _, _, err := kv.Get(r, 1, []byte("k"), 0)
				return err
			}); err != nil {
				b.Error(err)
			}
			v.Release()
		}
	})
}
