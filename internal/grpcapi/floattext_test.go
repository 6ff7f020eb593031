package grpcapi

import (
	"runtime"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/version"
)

// TestFloatDeltaTextGatedByVersion: an INCR_FLOAT with its increment as
// text (float_delta_text, field 18) reaches the log only once the
// cluster's version is version.IncrFloatText: a replica of an older binary
// does not know the field and stops on the entry. Below it the front door
// refuses the op and proposes nothing; at it the op is proposed with its
// text.
func TestFloatDeltaTextGatedByVersion(t *testing.T) {
	for _, v := range []version.Level{version.Base, version.IncrFloatText - 1, version.IncrFloatText} {
		f := newFakeNode(t, 1, 1, 1)
		f.echo = true
		f.clusterVersion.Store(uint32(v))
		s := NewKV(f, testLimits)
		op := &concordpb.Op{Type: concordpb.OpType_OP_INCR_FLOAT, Key: []byte("k"), FloatDeltaText: []byte("0.1")}
		a := <-sendBatch(s, nil, op)
		if v < version.IncrFloatText {
			if status.Code(a.err) != codes.InvalidArgument || f.proposalCount() != 0 {
				t.Errorf("cluster version %d: float_delta_text: %v, %d proposals; want InvalidArgument and none", v, a.err, f.proposalCount())
			}
			continue
		}
		if a.err != nil || f.proposalCount() != 1 {
			t.Fatalf("cluster version %d: float_delta_text: %v, %d proposals; want it proposed", v, a.err, f.proposalCount())
		}
		f.mu.Lock()
		got := string(f.proposals[0].GetKv().GetOps()[0].GetFloatDeltaText())
		f.mu.Unlock()
		if got != "0.1" {
			t.Errorf("proposed float_delta_text %q, want \"0.1\"", got)
		}
	}
}

// TestForwardedFloatDeltaTextWaitsForVersion: a node forwards an
// INCR_FLOAT with text once it has learned version.IncrFloatText; the
// leader, which may learn it a heartbeat later, waits for it rather than
// refuse the command (a Redis client would see the error), and proposes
// once it knows.
func TestForwardedFloatDeltaTextWaitsForVersion(t *testing.T) {
	f := newFakeNode(t, 1, 1, 1)
	f.echo = true
	f.clusterVersion.Store(uint32(version.IncrFloatText - 1))
	s := NewKV(f, testLimits)
	reads := f.versionReads.Load()
	ch := sendBatch(s, &concordpb.RequestHeader{Hops: 1},
		&concordpb.Op{Type: concordpb.OpType_OP_INCR_FLOAT, Key: []byte("k"), FloatDeltaText: []byte("0.1")})
	deadline := time.Now().Add(10 * time.Second)
	for f.versionReads.Load() < reads+3 { // it looks at the version again and again: it waits
		select {
		case a := <-ch:
			t.Fatalf("answered before the version was learned: %v, %v", a.res, a.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the forwarded batch neither waited nor answered")
		}
		runtime.Gosched()
	}
	if n := f.proposalCount(); n != 0 {
		t.Fatalf("%d proposals before the version was learned", n)
	}
	f.clusterVersion.Store(uint32(version.IncrFloatText))
	if a := <-ch; a.err != nil || f.proposalCount() != 1 {
		t.Fatalf("after the version was learned: %v, %d proposals; want it proposed", a.err, f.proposalCount())
	}
}

// TestFloatDeltaTextOnlyForIncrFloat: the text is an INCR_FLOAT's, alone
// (float_delta 0), and within the value size limit.
func TestFloatDeltaTextOnlyForIncrFloat(t *testing.T) {
	for name, op := range map[string]*concordpb.Op{
		"on a PUT":         {Type: concordpb.OpType_OP_PUT, Key: []byte("k"), FloatDeltaText: []byte("1")},
		"with float_delta": {Type: concordpb.OpType_OP_INCR_FLOAT, Key: []byte("k"), FloatDelta: 1, FloatDeltaText: []byte("1")},
		"too long":         {Type: concordpb.OpType_OP_INCR_FLOAT, Key: []byte("k"), FloatDeltaText: []byte("1.000000000")},
	} {
		if err := testLimits.checkOp(0, op, opGates{floatText: true}); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want InvalidArgument", name, err)
		}
	}
}
