package grpcapi

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/storepb"
	"github.com/concord-kv/concord/internal/version"
)

// TestReconcileRefusals: every InvalidArgument a reconciling op can get
// from the KV service, produced by the code that produces it (Reconcile
// on a node with a real state machine), gets RefusedForGood's verdict
// that node/reconcile.go acts on: the refusals of a key or value over
// the limits say the op can never apply (its hint may be dropped); those
// of a node behind, in its routing or its version, do not (the hint is
// kept and retried), each through the text it is told by. A rewording of
// any of them that would change the verdict fails here: the texts cross
// the peer request stream, a code and a message only, and are read by
// nodes of other binaries in a rolling upgrade (RefusedForGood).
func TestReconcileRefusals(t *testing.T) {
	put := func(key, value string) *concordpb.Op {
		return &concordpb.Op{Type: concordpb.OpType_OP_PUT, Key: []byte(key), Value: []byte(value), TentativeVersion: 42}
	}
	for _, c := range []struct {
		name string
		// setup prepares the node and returns the ops to reconcile.
		setup   func(t *testing.T, f *fakeNode, l *Limits) []*concordpb.Op
		forGood bool
		by      string // the text of reconcileTransient it is told by
	}{
		{name: "key over --max-key-bytes", forGood: true, setup: func(*testing.T, *fakeNode, *Limits) []*concordpb.Op {
			return []*concordpb.Op{put(strings.Repeat("k", 17), "v")}
		}},
		{name: "empty key", forGood: true, setup: func(*testing.T, *fakeNode, *Limits) []*concordpb.Op {
			return []*concordpb.Op{put("", "v")}
		}},
		{name: "value over --max-value-bytes", forGood: true, setup: func(*testing.T, *fakeNode, *Limits) []*concordpb.Op {
			return []*concordpb.Op{put("k", strings.Repeat("v", 65))}
		}},
		{name: "batch over its bytes", forGood: true, setup: func(_ *testing.T, _ *fakeNode, l *Limits) []*concordpb.Op {
			l.MaxBatchBytes = 8
			return []*concordpb.Op{put("k", strings.Repeat("v", 8))}
		}},
		{name: "delete's key over --max-key-bytes", forGood: true, setup: func(*testing.T, *fakeNode, *Limits) []*concordpb.Op {
			return []*concordpb.Op{{Type: concordpb.OpType_OP_DELETE, Key: []byte(strings.Repeat("k", 17)), TentativeVersion: 42}}
		}},
		{name: "keys of two shards", by: "span shards", setup: func(t *testing.T, f *fakeNode, _ *Limits) []*concordpb.Op {
			a, b := keysOfTwoShards(t, f)
			return []*concordpb.Op{put(a, "v"), put(b, "v")}
		}},
		{name: "a field the binary does not know", by: "does not know", setup: func(*testing.T, *fakeNode, *Limits) []*concordpb.Op {
			op := put("k", "v")
			op.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 999, protowire.VarintType), 1))
			return []*concordpb.Op{op}
		}},
		{name: "cluster version below versions", by: "cluster version", setup: func(_ *testing.T, f *fakeNode, _ *Limits) []*concordpb.Op {
			f.clusterVersion.Store(uint32(version.Versions - 1))
			return []*concordpb.Op{put("k", "v")}
		}},
		{name: "key no longer in the shard (a split)", by: "does not belong to shard", setup: func(t *testing.T, f *fakeNode, _ *Limits) []*concordpb.Op {
			// The node routes the key to its shard, whose replica has
			// already applied a split that moved it out: the state
			// machine refuses it.
			withStateMachine(t, f)
			apply := f.sm
			f.sm = func(shard ids.ShardID, cmd *storepb.Command) *storepb.CommandResult {
				d := f.descs[shard]
				moved := proto.CloneOf(d)
				moved.StartHash, moved.EndHash = d.GetEndHash(), d.GetEndHash() // the key's hash is not the range's last
				f.descs[shard] = moved
				defer func() { f.descs[shard] = d }()
				return apply(shard, cmd)
			}
			return []*concordpb.Op{put("k", "v")}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFakeNode(t, 1, 4, 1)
			f.echo = !strings.Contains(c.name, "split")
			l := Limits{MaxKeyBytes: 16, MaxValueBytes: 64}
			ops := c.setup(t, f, &l)
			_, err := NewKV(f, l).Reconcile(context.Background(), ops)
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("Reconcile answered %v, want InvalidArgument", err)
			}
			if got := RefusedForGood(err); got != c.forGood {
				t.Fatalf("RefusedForGood(%v) = %v, want %v", err, got, c.forGood)
			}
			// What the peer request stream carries of it: the same verdict.
			st := status.Convert(err)
			if got := RefusedForGood(status.Error(st.Code(), st.Message())); got != c.forGood {
				t.Fatalf("over the peer stream: RefusedForGood = %v, want %v", got, c.forGood)
			}
			if !c.forGood && !strings.Contains(st.Message(), c.by) {
				t.Fatalf("%q: not told by %q any more", st.Message(), c.by)
			}
		})
	}
	// The code decides first: the same texts under any other code are
	// not a refusal for good, and an InvalidArgument told by none of them
	// is.
	for _, err := range []error{
		status.Error(codes.FailedPrecondition, "value is 65 bytes; the limit is 64 (--max-value-bytes)"),
		status.Error(codes.Unavailable, "this node does not know the shards yet"),
		status.Error(codes.ResourceExhausted, "key is 17 bytes; the limit is 16 (--max-key-bytes)"),
	} {
		if RefusedForGood(err) {
			t.Errorf("RefusedForGood(%v) = true, want false", err)
		}
	}
	if err := status.Error(codes.InvalidArgument, "operation 0: something new"); !RefusedForGood(err) {
		t.Errorf("RefusedForGood(%v) = false, want true", err)
	}
}

// keysOfTwoShards returns two keys f routes to different shards.
func keysOfTwoShards(t *testing.T, f *fakeNode) (string, string) {
	t.Helper()
	first := f.shardOfKey("a")
	for _, k := range []string{"b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m"} {
		if f.shardOfKey(k) != first {
			return "a", k
		}
	}
	t.Fatal("no two keys of different shards")
	return "", ""
}
