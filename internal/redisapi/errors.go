package redisapi

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
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

// fromStatus turns an error of the KV service into a reply error. write
// says whether the request could have changed something: an Unavailable
// write is still reported as possibly applied when the message says so
// (a forwarded request whose target did not answer).
func fromStatus(err error, write bool) replyError {
	if re, ok := err.(replyError); ok {
		return re
	}
	st, _ := status.FromError(err)
	msg := st.Message()
	switch st.Code() {
	case codes.InvalidArgument, codes.OutOfRange, codes.NotFound, codes.FailedPrecondition:
		return replyError("ERR " + msg)
	case codes.Unavailable:
		return replyError("UNAVAILABLE " + msg)
	case codes.Unknown, codes.DeadlineExceeded, codes.Canceled:
		if !write {
			return replyError("UNAVAILABLE " + msg)
		}
		return replyError("AMBIGUOUS the write may or may not have applied: " + msg)
	case codes.ResourceExhausted:
		return replyError("ERR " + msg)
	}
	return replyError("ERR internal error: " + msg)
}
