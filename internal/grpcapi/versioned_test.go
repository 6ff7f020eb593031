package grpcapi

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/version"
)

// TestCommandsVersionedByClusterVersion: a leader's KV commands say their
// writes carry versions (KVCommand.versioned) once the cluster's version
// is version.Versions, and not before: a replica of an older binary could
// not read the values they write.
func TestCommandsVersionedByClusterVersion(t *testing.T) {
	for _, v := range []version.Level{version.Versions - 1, version.Versions} {
		f := newFakeNode(t, 1, 1, 1)
		f.echo = true
		f.clusterVersion.Store(uint32(v))
		s := NewKV(f, testLimits)
		if a := <-sendBatch(s, nil, &concordpb.Op{Type: concordpb.OpType_OP_PUT, Key: []byte("k"), Value: []byte("v")}); a.err != nil {
			t.Fatal(a.err)
		}
		f.mu.Lock()
		got := f.proposals[0].GetKv().GetVersioned()
		f.mu.Unlock()
		if got != (v >= version.Versions) {
			t.Errorf("cluster version %d: versioned %v", v, got)
		}
	}
}

// TestTentativeVersionOnlyFromNodes: a client may not send
// tentative_version; a node forwarding one may, once the cluster's version
// allows it. Like an INCR's repeat, "a node" is a request with hops above
// 0, which a client could forge: the state machine caps a tentative
// version at the shard's highest stamp (kv.beginVersion), so a forged one
// is no more than an ordinary write of the key at the current time.
func TestTentativeVersionOnlyFromNodes(t *testing.T) {
	op := func() *concordpb.Op {
		return &concordpb.Op{Type: concordpb.OpType_OP_PUT, Key: []byte("k"), Value: []byte("v"), TentativeVersion: 42}
	}
	for _, c := range []struct {
		v    version.Level
		hops uint32
		ok   bool
	}{{version.Versions, 0, false}, {version.Versions - 1, 1, false}, {version.Versions, 1, true}} {
		f := newFakeNode(t, 1, 1, 1)
		f.echo = true
		f.clusterVersion.Store(uint32(c.v))
		s := NewKV(f, testLimits)
		a := <-sendBatch(s, &concordpb.RequestHeader{Hops: c.hops}, op())
		if c.ok {
			if a.err != nil || f.proposalCount() != 1 {
				t.Errorf("%+v: %v, %d proposals; want it proposed", c, a.err, f.proposalCount())
			}
			continue
		}
		if status.Code(a.err) != codes.InvalidArgument || f.proposalCount() != 0 {
			t.Errorf("%+v: %v, %d proposals; want InvalidArgument and none", c, a.err, f.proposalCount())
		}
	}
}
