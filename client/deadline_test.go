package client

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/api/concordpb"
)

// checkDeadlineErr fails the test unless err is what a call that ran out of
// its deadline while retrying returns (docs/client.md, "Errors"): it wraps
// context.DeadlineExceeded and the last attempt's error (errors.Is finds
// both), status.Code and status.FromError read code, and the text keeps
// the last attempt's words (with last nil, only that it has some).
func checkDeadlineErr(t *testing.T, what string, err, last error, code codes.Code) {
	t.Helper()
	st, ok := status.FromError(err)
	switch {
	case !errors.Is(err, context.DeadlineExceeded):
		t.Errorf("%s: %v: does not wrap context.DeadlineExceeded", what, err)
	case last == nil:
		if status.Code(err) != code || !ok || st.Code() != code || st.Message() != err.Error() || !strings.Contains(err.Error(), "(last error: ") {
			t.Errorf("%s: %v: status.Code %v (FromError %v, %v, %q), want %v and the last error's text", what, err, status.Code(err), st.Code(), ok, st.Message(), code)
		}
	case !errors.Is(err, last):
		t.Errorf("%s: %v: does not wrap the last attempt's error %v", what, err, last)
	case status.Code(err) != code || !ok || st.Code() != code:
		t.Errorf("%s: %v: status.Code %v (FromError %v, %v), want %v", what, err, status.Code(err), st.Code(), ok, code)
	case !strings.Contains(err.Error(), status.Convert(last).Message()) || st.Message() != err.Error():
		t.Errorf("%s: %q (status message %q) does not carry the last attempt's %q", what, err, st.Message(), status.Convert(last).Message())
	}
}

// kvOps are the client's KV calls, each as one call of op on c with ctx.
var kvOps = []struct {
	name  string
	write bool
	op    func(ctx context.Context, c *Client) error
}{
	{"get", false, func(ctx context.Context, c *Client) error { _, _, err := c.Get(ctx, []byte("k")); return err }},
	{"put", true, func(ctx context.Context, c *Client) error {
		_, _, err := c.Put(ctx, []byte("k"), []byte("v"))
		return err
	}},
	{"put-prev", true, func(ctx context.Context, c *Client) error {
		_, _, err := c.Put(ctx, []byte("k"), []byte("v"), ReturnPrev())
		return err
	}},
	{"delete", true, func(ctx context.Context, c *Client) error { _, err := c.Delete(ctx, []byte("k")); return err }},
	{"cas", true, func(ctx context.Context, c *Client) error {
		_, err := c.CompareAndSwap(ctx, []byte("k"), CAS{ExpectAbsent: true, Value: []byte("v")})
		return err
	}},
	{"batch-write", true, func(ctx context.Context, c *Client) error {
		_, err := c.Batch(ctx, []*concordpb.Op{{Type: concordpb.OpType_OP_INCR, Key: []byte("k"), IntDelta: 1}})
		return err
	}},
	{"batch-read", false, func(ctx context.Context, c *Client) error {
		_, err := c.Batch(ctx, []*concordpb.Op{{Type: concordpb.OpType_OP_GET, Key: []byte("k")}})
		return err
	}},
	{"scan", false, func(ctx context.Context, c *Client) error { _, err := c.Scan(ctx, []byte("a"), nil, 0); return err }},
	{"scan-page", false, func(ctx context.Context, c *Client) error {
		_, err := c.ScanPage(ctx, []byte("a"), nil, 10)
		return err
	}},
}

// TestDeadlineErrorKeepsTheLastAttempts protects the error of a KV call
// that retried until its deadline, on each path (unary, gRPC stream,
// framed TCP) and for each call: it wraps context.DeadlineExceeded and the
// last attempt's error, status.Code reads the last attempt's code (here
// Unavailable, not Unknown), and a write that may have applied (its first
// attempt timed out) is still ErrAmbiguous, one whose every attempt was
// refused is not. The error once kept only the last attempt's text:
// status.Code read Unknown, and errors.Is could not reach it.
func TestDeadlineErrorKeepsTheLastAttempts(t *testing.T) {
	refused := status.Error(codes.Unavailable, "shard 1: no leader known")
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			var stallNext atomic.Bool // the next request stalls: its attempt times out
			opts := p.opts
			opts.AttemptTimeout = 200 * time.Millisecond
			_, c := scriptedNode(t, opts, func(int, *concordpb.RequestHeader) error {
				if stallNext.CompareAndSwap(true, false) {
					return errStall
				}
				return refused
			})
			for _, o := range kvOps {
				for _, uncertain := range []bool{false, true} {
					stallNext.Store(uncertain)
					ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
					err := o.op(ctx, c)
					cancel()
					what := o.name
					if uncertain {
						what += " after a timed-out attempt"
					}
					want := o.write && uncertain
					if status.Code(err) == codes.DeadlineExceeded {
						// Rarely the deadline cuts an attempt in flight
						// (a backoff that ended just before it): that
						// attempt is the last, and a write it carried
						// may have applied.
						t.Logf("%s: the deadline cut the last attempt: %v", what, err)
						checkDeadlineErr(t, what, err, nil, codes.DeadlineExceeded)
						want = o.write
					} else if !errors.Is(err, refused) && strings.Contains(err.Error(), "was not sent") {
						// Under load the attempt after a stalled one may
						// find no connection ready in time: the client's
						// own Unavailable, sent nowhere, is then the last.
						t.Logf("%s: the last attempt was not sent: %v", what, err)
						checkDeadlineErr(t, what, err, nil, codes.Unavailable)
					} else {
						checkDeadlineErr(t, what, err, refused, codes.Unavailable)
					}
					if errors.Is(err, ErrAmbiguous) != want {
						t.Errorf("%s: %v: ErrAmbiguous %v, want %v", what, err, !want, want)
					}
				}
			}
		})
	}
}
