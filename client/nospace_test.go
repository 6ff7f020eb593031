package client

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/api/concordpb"
)

// TestNoSpaceIsDefiniteAndNotRetried protects what a write refused by the
// space alarm reports (a ResourceExhausted "no space: ...", given before
// proposing): ErrNoSpace, with the node's words and code, not ErrAmbiguous
// (nothing was proposed), after one attempt (the alarm clears only once
// space is freed: retrying until the deadline only delays the answer).
// After an attempt that may have applied, the same refusal is ErrNoSpace
// and ErrAmbiguous.
func TestNoSpaceIsDefiniteAndNotRetried(t *testing.T) {
	const msg = "no space: node 2 has 0.8 GiB free, under its --reserve-disk-bytes of 1.0 GiB"
	refusal := status.Error(codes.ResourceExhausted, msg)
	put := func(c *Client) error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _, err := c.Put(ctx, []byte("k"), []byte("v"))
		return err
	}
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			opts := p.opts
			opts.AttemptTimeout = 2 * time.Second // a refusal is never a timeout, even on a loaded machine
			f, c := scriptedNode(t, opts, func(int, *concordpb.RequestHeader) error { return refusal })
			err := put(c)
			if !errors.Is(err, ErrNoSpace) || errors.Is(err, ErrAmbiguous) || status.Code(err) != codes.ResourceExhausted ||
				!strings.Contains(err.Error(), msg) {
				t.Fatalf("refused for space: %v (code %v); want ErrNoSpace, not ErrAmbiguous, keeping the node's words", err, status.Code(err))
			}
			if n := len(f.received()); n != 1 {
				t.Fatalf("refused for space after %d attempts; want 1 (not retried)", n)
			}
			opts.AttemptTimeout = 300 * time.Millisecond
			f, c = scriptedNode(t, opts, func(n int, _ *concordpb.RequestHeader) error {
				if n == 0 {
					return errStall
				}
				return refusal
			})
			if err := put(c); !errors.Is(err, ErrNoSpace) || !errors.Is(err, ErrAmbiguous) || len(f.received()) != 2 {
				t.Fatalf("timed out, then refused for space: %v after %d attempts; want ErrNoSpace and ErrAmbiguous after 2", err, len(f.received()))
			}
		})
	}
}
