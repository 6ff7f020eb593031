package grpcapi

import (
	"context"
	"errors"
	"fmt"
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
// changes nothing, is reported as Unavailable rather than as an unknown
// outcome, except when the client's own deadline passed.
func TestReadStatusIsNeverAmbiguous(t *testing.T) {
	if c := status.Code(readStatus(replica.ErrAmbiguous)); c != codes.Unavailable {
		t.Fatalf("ambiguous read: %v, want Unavailable", c)
	}
	deadline := fmt.Errorf("%w: %w", replica.ErrAmbiguous, context.DeadlineExceeded)
	if c := status.Code(readStatus(deadline)); c != codes.DeadlineExceeded {
		t.Fatalf("read past its deadline: %v, want DeadlineExceeded", c)
	}
	if c := status.Code(readStatus(&replica.NotLeaderError{Shard: 1})); c != codes.Unavailable {
		t.Fatalf("read on a follower: %v, want Unavailable", c)
	}
}
