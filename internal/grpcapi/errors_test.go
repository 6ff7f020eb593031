package grpcapi

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/internal/multiraft"
	"github.com/concord-kv/concord/internal/replica"
)

// TestToStatusMapsEachErrorClass protects the error contract of kv.proto:
// Unavailable means certainly not applied, Unknown/DeadlineExceeded/Canceled
// with "ambiguous" mean the write may have applied, so clients retry safely.
func TestToStatusMapsEachErrorClass(t *testing.T) {
	ambiguous := func(cause error) error { return fmt.Errorf("%w: %w", replica.ErrAmbiguous, cause) }
	tests := []struct {
		name   string
		err    error
		code   codes.Code
		prefix string // of the message; "" to skip
	}{
		{"a status passes through", status.Error(codes.FailedPrecondition, "from a peer"), codes.FailedPrecondition, "from a peer"},
		{"not leader", &replica.NotLeaderError{Shard: 3, LeaderNode: 2}, codes.Unavailable, "shard 3: not the leader; leader is on node 2"},
		{"wrapped not leader", fmt.Errorf("propose: %w", &replica.NotLeaderError{Shard: 3}), codes.Unavailable, ""},
		{"ambiguous after deadline", ambiguous(context.DeadlineExceeded), codes.DeadlineExceeded, "ambiguous: deadline passed"},
		{"ambiguous after cancel", ambiguous(context.Canceled), codes.Canceled, "ambiguous: request canceled"},
		{"ambiguous", replica.ErrAmbiguous, codes.Unknown, "ambiguous: replica: outcome unknown"},
		{"deadline before proposing", context.DeadlineExceeded, codes.DeadlineExceeded, "context deadline exceeded"},
		{"canceled before proposing", context.Canceled, codes.Canceled, "context canceled"},
		{"dropped", replica.ErrDropped, codes.Unavailable, ""},
		{"no replica", multiraft.ErrNoReplica, codes.Unavailable, ""},
		{"removed", replica.ErrRemoved, codes.Unavailable, ""},
		{"host stopped", multiraft.ErrStopped, codes.Unavailable, ""},
		{"learner not caught up by the deadline", fmt.Errorf("shard 2: %w: %w", multiraft.ErrNotCaughtUp, context.DeadlineExceeded), codes.Unavailable, "shard 2: multiraft: learner has not caught up"},
		{"anything else", errors.New("disk on fire"), codes.Internal, "disk on fire"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := status.Convert(toStatus(tt.err))
			if st.Code() != tt.code {
				t.Fatalf("code %v, want %v (%q)", st.Code(), tt.code, st.Message())
			}
			if len(st.Message()) < len(tt.prefix) || st.Message()[:len(tt.prefix)] != tt.prefix {
				t.Fatalf("message %q, want prefix %q", st.Message(), tt.prefix)
			}
		})
	}
	if toStatus(nil) != nil {
		t.Fatal("toStatus(nil) is not nil")
	}
}

// TestReadStatusIsNeverAmbiguous protects that a failed read barrier, which
// changes nothing, is reported as a definite failure: a timed-out barrier
// as Unavailable (retryable), the client's own deadline as
// DeadlineExceeded, and no message saying "ambiguous" or "outcome unknown",
// which a client reads as a write that may have applied.
func TestReadStatusIsNeverAmbiguous(t *testing.T) {
	for _, tc := range []struct {
		err  error
		code codes.Code
	}{
		{replica.ErrReadTimeout, codes.Unavailable},
		{fmt.Errorf("shard 3: %w", replica.ErrReadTimeout), codes.Unavailable},
		{replica.ErrAmbiguous, codes.Unavailable},
		{fmt.Errorf("%w: %w", replica.ErrAmbiguous, context.DeadlineExceeded), codes.DeadlineExceeded},
		{fmt.Errorf("%w: %w", replica.ErrAmbiguous, context.Canceled), codes.Canceled},
		{context.DeadlineExceeded, codes.DeadlineExceeded},
	} {
		st := status.Convert(readStatus(tc.err))
		if st.Code() != tc.code || strings.Contains(st.Message(), "ambiguous") || strings.Contains(st.Message(), "outcome unknown") {
			t.Fatalf("read failing with %v: %v %q, want %v without ambiguity", tc.err, st.Code(), st.Message(), tc.code)
		}
	}
	// Outside the read path (toStatus) the read timeout stays definite too.
	if c := status.Code(toStatus(replica.ErrReadTimeout)); c != codes.Unavailable {
		t.Fatalf("toStatus(ErrReadTimeout) = %v, want Unavailable", c)
	}
	if c := status.Code(readStatus(&replica.NotLeaderError{Shard: 1})); c != codes.Unavailable {
		t.Fatalf("read on a follower: %v, want Unavailable", c)
	}
}
