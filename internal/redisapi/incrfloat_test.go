package redisapi

import (
	"context"
	"testing"
	"time"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/version"
)

// versionKV is fakeKV at a given cluster version, keeping each op it is
// sent.
type versionKV struct {
	*fakeKV
	v   version.Level
	ops []*concordpb.Op
}

func (k *versionKV) ClusterVersion() version.Level { return k.v }

func (k *versionKV) Batch(ctx context.Context, r *concordpb.BatchRequest) (*concordpb.BatchResponse, error) {
	k.mu.Lock()
	k.ops = append(k.ops, r.GetOps()...)
	k.mu.Unlock()
	return k.fakeKV.Batch(ctx, r)
}

// TestIncrByFloatOpByVersion: INCRBYFLOAT sends its increment as the
// client's text (float_delta_text) only once the cluster's version is
// version.IncrFloatText, since a replica of an older binary stops on the
// field; below it, as a double. At that version a bad increment is
// answered at once, nothing sent, and the texts strtold reads are sent.
func TestIncrByFloatOpByVersion(t *testing.T) {
	for _, tc := range []struct {
		v          version.Level
		cmd, reply string
		want       *concordpb.Op // nil: nothing sent
	}{
		{version.IncrFloatText - 1, "INCRBYFLOAT k 0.1", "$0\r\n\r\n", &concordpb.Op{FloatDelta: 0.1}},
		{version.Unknown, "INCRBYFLOAT k 0.1", "$0\r\n\r\n", &concordpb.Op{FloatDelta: 0.1}},
		{version.IncrFloatText, "INCRBYFLOAT k 0.1", "$0\r\n\r\n", &concordpb.Op{FloatDeltaText: []byte("0.1")}},
		{version.IncrFloatText, "INCRBYFLOAT k 3.0000000000000001", "$0\r\n\r\n", &concordpb.Op{FloatDeltaText: []byte("3.0000000000000001")}},
		{version.IncrFloatText, "INCRBYFLOAT k 0x10", "$0\r\n\r\n", &concordpb.Op{FloatDeltaText: []byte("0x10")}},
		{version.IncrFloatText, "INCRBYFLOAT k -inf", "$0\r\n\r\n", &concordpb.Op{FloatDeltaText: []byte("-inf")}},
		{version.IncrFloatText, "INCRBYFLOAT k 1p3", "-ERR value is not a valid float\r\n", nil},
		{version.IncrFloatText, "INCRBYFLOAT k nan", "-ERR value is not a valid float\r\n", nil},
		{version.IncrFloatText, "INCRBYFLOAT k 1e-5000", "-ERR value is not a valid float\r\n", nil},
	} {
		kv := &versionKV{fakeKV: &fakeKV{counters: map[string]int64{}}, v: tc.v}
		s := New(kv, Config{})
		got := pipelineOn(s, tc.cmd)
		s.Close(time.Second)
		if got != tc.reply {
			t.Errorf("version %d: %s: reply %q, want %q", tc.v, tc.cmd, got, tc.reply)
		}
		if tc.want == nil {
			if len(kv.ops) != 0 {
				t.Errorf("version %d: %s sent %v, want nothing", tc.v, tc.cmd, kv.ops)
			}
			continue
		}
		if len(kv.ops) != 1 {
			t.Fatalf("version %d: %s sent %d ops, want 1", tc.v, tc.cmd, len(kv.ops))
		}
		op := kv.ops[0]
		if op.GetType() != concordpb.OpType_OP_INCR_FLOAT || op.GetFloatDelta() != tc.want.GetFloatDelta() ||
			string(op.GetFloatDeltaText()) != string(tc.want.GetFloatDeltaText()) {
			t.Errorf("version %d: %s sent %v, want float_delta %v, float_delta_text %q", tc.v, tc.cmd, op,
				tc.want.GetFloatDelta(), tc.want.GetFloatDeltaText())
		}
	}
}

// TestNaNOrInfinityError: the state machine's OP_ERROR_NAN_OR_INFINITY is
// Redis's error for an increment to NaN or infinity.
func TestNaNOrInfinityError(t *testing.T) {
	if got := opError(concordpb.OpError_OP_ERROR_NAN_OR_INFINITY); got != "ERR increment would produce NaN or Infinity" {
		t.Errorf("opError(NAN_OR_INFINITY) = %q", got)
	}
}
