package grpcapi

import (
	"testing"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/version"
)

// TestWritesMeasureExpiryOnStampsAtTheVersion: a leader's KV commands ask
// for key expiry at the highest stamp (KVCommand.expiry_on_stamps) only
// once the cluster's version allows it: a replica of an older binary
// would measure on the shard's clock (and stops on the field it does not
// know).
func TestWritesMeasureExpiryOnStampsAtTheVersion(t *testing.T) {
	f := newFakeNode(t, 1, 4, 1)
	kv := NewKV(f, testLimits)
	ops := []*concordpb.Op{{Type: concordpb.OpType_OP_PUT, Key: []byte("k"), Value: []byte("v"), TtlMs: 1000}}
	for _, v := range []version.Level{version.Base, version.IncrRepeat, version.ExpiryOnStamps} {
		f.clusterVersion.Store(uint32(v))
		cmd := kv.kvCommand(&concordpb.RequestHeader{}, ops)
		if got, want := cmd.GetKv().GetExpiryOnStamps(), v >= version.ExpiryOnStamps; got != want || cmd.GetUnixNanos() == 0 {
			t.Fatalf("at cluster version %d: expiry_on_stamps %v, stamp %d; want %v and a stamp", v, got, cmd.GetUnixNanos(), want)
		}
	}
}
