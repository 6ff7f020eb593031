package kv

import (
	"context"
	"fmt"
	"sync/atomic"
)

// MaxReadBytes bounds the bytes one read gathers before it answers: the
// values of a batch of GETs, the keys and values of a scan page. It is
// the gRPC message limit, so an answer over it could not be sent anyway;
// the bound is checked as the results are read, so a read of 1,000 keys
// of 8 MiB values fails at its 64 MiB instead of holding 8 GiB first.
const MaxReadBytes = 64 << 20

// Budget is what reads may still gather, in bytes, shared by every read
// charged to it (they may run concurrently). outer, when set, is a wider
// budget the same bytes also count against (a Redis pipeline's output
// buffer, around one command's); a charge stops at the first level it
// does not fit, innermost first, so the error says which bound was
// passed, and the levels outside it are not charged.
type Budget struct {
	left  atomic.Int64
	limit int64
	outer *Budget
}

// NewBudget returns a budget of limit bytes inside outer (nil: none).
func NewBudget(limit int64, outer *Budget) *Budget {
	b := &Budget{limit: limit, outer: outer}
	b.left.Store(limit)
	return b
}

// Reset gives b its whole limit again (a Redis connection's budget, per
// pipeline). Nothing may be charging b meanwhile.
func (b *Budget) Reset() { b.left.Store(b.limit) }

// Exhausted reports whether a charge to b failed since its last Reset.
func (b *Budget) Exhausted() bool { return b.left.Load() < 0 }

// Spent fails, as Take does, when b or an outer budget is already
// exhausted: a read checks it before it reads anything more, so reads
// under a spent budget (the rest of a Redis pipeline) read nothing.
func (b *Budget) Spent() error {
	for l := b; l != nil; l = l.outer {
		if l.left.Load() < 0 {
			return &TooLargeError{Limit: l.limit}
		}
	}
	return nil
}

// Take charges n bytes to b and its outer budgets, and fails (a
// *TooLargeError) at the first that has not n left: what the read holds
// is to be dropped. A failed level stays exhausted, so every later charge
// to it fails too.
func (b *Budget) Take(n int) error {
	for l := b; l != nil; l = l.outer {
		if l.left.Add(-int64(n)) < 0 {
			return &TooLargeError{Limit: l.limit}
		}
	}
	return nil
}

// TooLargeError says a read's results passed its budget (grpcapi answers
// it ResourceExhausted).
type TooLargeError struct{ Limit int64 }

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("reply too large: the read's results pass %d bytes; read fewer or smaller keys at a time", e.Limit)
}

type budgetKey struct{}

// WithBudget returns ctx carrying b: the KV service's reads under ctx
// charge b instead of a budget of MaxReadBytes of their own (an
// in-process caller, the Redis server, bounds them itself), and the
// results of batches of GETs it forwards are charged to b once they
// arrive.
func WithBudget(ctx context.Context, b *Budget) context.Context {
	return context.WithValue(ctx, budgetKey{}, b)
}

// BudgetFrom is the budget ctx carries, nil if none.
func BudgetFrom(ctx context.Context) *Budget {
	b, _ := ctx.Value(budgetKey{}).(*Budget)
	return b
}
