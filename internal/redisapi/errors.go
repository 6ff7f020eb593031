package redisapi

import (
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/internal/kv"
)

// replyError is an error that is sent to the client as it is: its text
// starts with a Redis error code ("ERR", "WRONGTYPE", "CROSSSLOT").
type replyError string

func (e replyError) Error() string { return string(e) }

// Error texts that clients and tests recognise, as Redis writes them.
const (
	errSyntax      = replyError("ERR syntax error")
	errNotInt      = replyError("ERR value is not an integer or out of range")
	errNotFloat    = replyError("ERR value is not a valid float")
	errOverflow    = replyError("ERR increment or decrement would overflow")
	errNaN         = replyError("ERR increment would produce NaN or Infinity")
	errCrossSlot   = replyError("CROSSSLOT Keys in request don't hash to the same slot")
	errNoAuth      = replyError("NOAUTH Authentication required.")
	errWrongPass   = replyError("WRONGPASS invalid username-password pair or user is disabled.")
	errExecAbort   = replyError("EXECABORT Transaction discarded because of previous errors.")
	errOffsetRange = replyError("ERR offset is out of range")
)

// errResultTooLarge answers a command whose value would take its batch's
// replies past the most bytes of values one batch returns
// (kv.MaxResultBytes): only a transaction's commands can, as EXEC sends
// its queue as one batch. The command changed nothing.
const errResultTooLarge = "ERR reply too large: the transaction's values exceed the 63 MiB one batch may return; " +
	"this command was not run, run it outside the transaction or in a smaller one"

// errWrongResults fails a batch answered with a number of results other
// than its ops: it was served, so a write's outcome is unknown
// (fromStatus answers it AMBIGUOUS), a read's an internal error.
var errWrongResults = status.Error(codes.Internal, "a batch answered with the wrong number of results")

// fromStatus turns an error of the KV service into a reply error. write
// says whether the request could have changed something: a write that
// may have applied (mayHaveApplied) is AMBIGUOUS, whatever its code, as
// docs/redis.md promises; a read never is.
func fromStatus(err error, write bool) replyError {
	if re, ok := err.(replyError); ok {
		return re
	}
	st, _ := status.FromError(err)
	msg := st.Message()
	if reason, ok := noSpaceReason(st); ok {
		// The space alarm's refusal, given before proposing: Redis's
		// analogue is -OOM (maxmemory).
		return replyError("NOSPACE " + reason)
	}
	if write && mayHaveApplied(st) {
		return replyError("AMBIGUOUS the write may or may not have applied: " + msg)
	}
	switch st.Code() {
	case codes.InvalidArgument, codes.OutOfRange, codes.NotFound, codes.FailedPrecondition, codes.ResourceExhausted:
		return replyError("ERR " + msg)
	case codes.Unavailable, codes.Unknown, codes.DeadlineExceeded, codes.Canceled:
		return replyError("UNAVAILABLE " + msg)
	}
	return replyError("ERR internal error: " + msg)
}

// mayHaveApplied reports whether a write that failed with st may have
// applied, as the Go client judges (client.mayHaveApplied, isRefusal,
// windowFull) but from what reaches this in-process caller. Certain
// refusals are bad input and failed preconditions (checked before
// proposing, or refused whole by the state machine), a session's full
// window (kv.WindowFullMark: any other ResourceExhausted is gRPC's, for a
// reply over the message limit, sent after the leader applied), and an
// Unavailable that does not say the request was sent (sentMarks): a node
// that refused it before proposing, or could not reach the leader.
// Anything else (Unknown, a deadline, Internal after applying, DataLoss,
// a code not expected here) may have applied.
func mayHaveApplied(st *status.Status) bool {
	switch st.Code() {
	case codes.InvalidArgument, codes.OutOfRange, codes.NotFound, codes.FailedPrecondition, codes.AlreadyExists:
		return false
	case codes.ResourceExhausted:
		_, noSpace := noSpaceReason(st)
		return !noSpace && !strings.Contains(st.Message(), kv.WindowFullMark)
	case codes.Unavailable:
		for _, m := range sentMarks {
			if strings.Contains(st.Message(), m) {
				return true
			}
		}
		return false
	}
	return true
}

// noSpaceReason returns the words after kv.NoSpaceMark of the space
// alarm's refusal of a write that adds data (grpcapi.KV.SetNoSpace); false
// for any other error.
func noSpaceReason(st *status.Status) (string, bool) {
	if st.Code() != codes.ResourceExhausted {
		return "", false
	}
	return strings.CutPrefix(st.Message(), kv.NoSpaceMark)
}

// sentMarks are in the messages of the Unavailable errors of a write that
// was sent and may have arrived: a forward whose target did not answer in
// time (grpcapi.forward), a forward whose request stream broke after
// sending it (client.streamMux.broken, the framed wire's too), and a unary
// forward whose connection broke without the target's answer
// (grpcapi.answeredConn).
var sentMarks = []string{"may have received the request", "after the request was sent"}
