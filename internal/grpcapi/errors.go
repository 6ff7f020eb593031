package grpcapi

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/internal/kv"
	"github.com/concord-kv/concord/internal/multiraft"
	"github.com/concord-kv/concord/internal/replica"
)

// toStatus maps an internal error to the gRPC status the API documents
// (see api/concordpb/kv.proto): Unavailable when nothing was applied,
// Unknown ("ambiguous") when the outcome cannot be known.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err // already a status, e.g. from a forwarded call
	}
	var nl *replica.NotLeaderError
	var tooLarge *kv.TooLargeError
	switch {
	case errors.As(err, &tooLarge):
		return status.Error(codes.ResourceExhausted, tooLarge.Error())
	case errors.As(err, &nl):
		return status.Error(codes.Unavailable, nl.Error())
	case errors.Is(err, multiraft.ErrNotCaughtUp):
		// Before the context cases: the deadline ended a wait in which
		// nothing was proposed, so nothing is ambiguous.
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, replica.ErrAmbiguous) && errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, "ambiguous: deadline passed after the request was proposed; it may or may not have applied")
	case errors.Is(err, replica.ErrAmbiguous) && errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, "ambiguous: request canceled after it was proposed; it may or may not have applied")
	case errors.Is(err, replica.ErrAmbiguous):
		return status.Error(codes.Unknown, "ambiguous: "+err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, multiraft.ErrStaleEpoch):
		return status.Error(codes.Aborted, err.Error())
	case errors.Is(err, multiraft.ErrRefused):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, replica.ErrDropped), errors.Is(err, multiraft.ErrNoReplica), errors.Is(err, multiraft.ErrChangePending),
		errors.Is(err, replica.ErrRemoved), errors.Is(err, multiraft.ErrStopped), errors.Is(err, replica.ErrReadTimeout):
		return status.Error(codes.Unavailable, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}

// readStatus maps a ReadIndex failure. A read never changes anything, so
// its failures are definite: a timed-out barrier (ErrReadTimeout) is
// Unavailable, retryable, and nothing a read returns says "ambiguous" or
// "outcome unknown", which to a client means a write that may have
// applied. ErrAmbiguous is a proposal's and no read path returns it; were
// one to, it is reported as a plain failed read all the same.
func readStatus(err error) error {
	switch {
	case errors.Is(err, replica.ErrReadTimeout):
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, replica.ErrAmbiguous) && errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, "read not confirmed before the deadline; nothing was changed")
	case errors.Is(err, replica.ErrAmbiguous) && errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, "read canceled before it was confirmed; nothing was changed")
	case errors.Is(err, replica.ErrAmbiguous):
		return status.Error(codes.Unavailable, "read not confirmed; nothing was changed, retry")
	}
	return toStatus(err)
}

func invalid(format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, format, args...)
}

func failedPrecondition(format string, args ...any) error {
	return status.Errorf(codes.FailedPrecondition, format, args...)
}
