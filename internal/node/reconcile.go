package node

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/grpcapi"
	"github.com/concord-kv/concord/internal/hints"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/version"
)

// The reconciler proposes the tentative writes this node holds (available
// mode: internal/hints, grpcapi/available.go) once their shards can commit
// them: every reconcileInterval, and at once after a write is held, it
// takes a page of hints, groups them by shard and proposes each group as
// batches of PUTs and DELETEs carrying their versions (tentative_version)
// through the path a client's write to this node takes (KV.Reconcile: to
// the shard's leader). The state machine applies each op only if its
// version is above the key's, and says which applied. On the answer each
// hint whose version is unchanged is removed (a newer tentative write of
// the key taken meanwhile stays, for the next round).
//
// A shard whose group fails keeps its hints and is left alone for
// reconcileBackoffMin, doubling to reconcileBackoffMax, until a group of
// it succeeds; the other shards go on at the normal cadence. A hint its
// shard refuses alone as invalid (InvalidArgument: a key or value over
// limits lowered since it was taken) can never apply: it is dropped, with
// an ERROR, rather than retried for ever.

const (
	reconcileInterval = 500 * time.Millisecond
	reconcilePage     = 256     // hints per page
	reconcilePageMem  = 4 << 20 // bytes of hints per page (past its first)
	// A batch stays well under the KV service's limits on one batch
	// (grpcapi: 1,000 ops, DefaultMaxBatchBytes of keys and values, 8 MiB),
	// which refuse a batch over them whole.
	reconcileBatchOps   = 256
	reconcileBatchBytes = 4 << 20
	// reconcileSkipPages bounds the pages one round reads while their
	// shards are all backing off: a dead shard's many hints ahead of a
	// healthy shard's delay it by fewer rounds, and a round in which every
	// shard backs off still reads little. (Keys are placed by hash, so
	// the shards' hints interleave in key order: such pages are rare but
	// when one shard holds nearly all the hints.)
	reconcileSkipPages  = 4
	reconcileTimeout    = 5 * time.Second
	reconcileBackoffMin = time.Second
	reconcileBackoffMax = 30 * time.Second
	// droppedKeyShown is how much of a dropped hint's key its ERROR shows.
	droppedKeyShown = 64
)

// reconcileEnv is what the reconciler uses of its node; a test gives its
// own send and shardOf.
type reconcileEnv struct {
	hints *hints.Log
	// allowed reports whether the cluster's version allows versions: no
	// replica applies tentative_version before.
	allowed func() bool
	// shardOf returns the shard of key; false if this node does not know
	// it yet (the hint waits for a later round).
	shardOf func(key []byte) (ids.ShardID, bool)
	// send proposes ops, of one shard (KV.Reconcile).
	send func(ctx context.Context, ops []*concordpb.Op) (*concordpb.BatchResponse, error)
	// invalid says why h could never be written through this node as it
	// is configured now (its key or value over this node's limits); nil:
	// it could. A refusal from elsewhere (a leader with other limits, one
	// behind in a rolling restart) drops nothing by itself.
	invalid func(h hints.Hint) error
	now     func() time.Time
	log     *slog.Logger
}

// reconciler is the reconciler's state; only its goroutine touches it,
// but for the counters, which /metrics reads.
type reconciler struct {
	env reconcileEnv
	// from is where the next round's page starts (nil: the first hint),
	// so that a shard that cannot commit does not hold the others' hints
	// behind a page of its own for ever.
	from []byte
	// backoff holds the shards whose last group failed.
	backoff map[ids.ShardID]shardBackoff
	// reconciled counts the ops answered, by outcome: applied, superseded
	// by a newer version, or refused (dropped: they can never apply).
	reconciled *prometheus.CounterVec
}

// shardBackoff is how long a shard is left alone after a failed group.
type shardBackoff struct {
	wait  time.Duration
	until time.Time
}

// reconcileOutcomes are concord_reconciled_total's outcomes, each there
// at 0 from the node's start (docs/operations.md lists them): one that
// appeared only at its first event, as a refusal is rare, left /metrics
// without it.
var reconcileOutcomes = []string{"applied", "superseded", "refused"}

func newReconcileCounter() *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "concord_reconciled_total",
		Help: "Tentative writes (available mode) this node proposed once their shard had a quorum, by outcome: applied, superseded by a newer version of the key, or refused by the shard as invalid (dropped: it can never apply).",
	}, []string{"outcome"})
	for _, o := range reconcileOutcomes {
		c.WithLabelValues(o)
	}
	return c
}

// heldTentative is told of each write the KV service held; the first
// after none were held is worth a WARN: a shard cannot commit.
func (n *Node) heldTentative(shard ids.ShardID, first bool) {
	if first {
		n.log.Warn(fmt.Sprintf("shard %d has no quorum within --available-timeout: holding tentative writes", shard),
			"shard", shard, "available_timeout", n.cfg.AvailableTimeout)
	}
}

// mayHoldTentative reports whether this node may hold a new tentative
// write: not once its own record says it is leaving (or gone). The
// placement leader marks a drained leaving node removed once a heartbeat
// of it says it holds none (scheduler rule 6), so a write held after that
// heartbeat would be lost with it; refused, the client gets the shard's
// error and can write through another node. The node learns its state from
// a heartbeat answer, a round after the removal was asked for: before it
// has drained, unless it held no replicas (then a write held in that one
// round can still be lost, with the ERROR of a removed node).
func (n *Node) mayHoldTentative() bool {
	switch n.book.get(n.ID()).GetState() {
	case concordpb.NodeState_NODE_LEAVING, concordpb.NodeState_NODE_REMOVED, concordpb.NodeState_NODE_REPLACED:
		return false
	}
	return true
}

// startReconciler runs the reconciler until the node stops.
func (n *Node) startReconciler() {
	n.recon.env = reconcileEnv{
		hints:   n.hints,
		allowed: func() bool { return n.kv.ClusterVersion().Allows(version.Versions) },
		shardOf: func(key []byte) (ids.ShardID, bool) {
			d := n.backend().Table().Lookup(key)
			return ids.ShardID(d.GetShardId()), d != nil
		},
		send: n.kv.Reconcile,
		invalid: func(h hints.Hint) error {
			switch {
			case len(h.Key) == 0 || len(h.Key) > n.cfg.MaxKeyBytes:
				return fmt.Errorf("key of %d bytes, limit %d (--max-key-bytes)", len(h.Key), n.cfg.MaxKeyBytes)
			case len(h.Value) > n.cfg.MaxValueBytes:
				return fmt.Errorf("value of %d bytes, limit %d (--max-value-bytes)", len(h.Value), n.cfg.MaxValueBytes)
			}
			return nil
		},
		now: time.Now,
		log: n.log,
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		if g := n.testHooks.reconcileGate; g != nil {
			select {
			case <-g:
			case <-n.stopC:
				return
			}
		}
		n.recon.run(n.stopC)
	}()
}

// run runs a round every reconcileInterval and after each write held,
// until stopC closes; the round's calls are cancelled then, so that a
// shard that cannot answer does not hold the node's stop up.
func (r *reconciler) run(stopC <-chan struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-stopC:
			cancel()
		case <-ctx.Done(): // run returned
		}
	}()
	t := time.NewTicker(reconcileInterval)
	defer t.Stop()
	waiting := false
	for {
		// After a round that found only shards backing off, a write
		// held (likely of one of them: its node is cut off) starts no
		// round before the next tick: each would read pages for nothing.
		added := r.env.hints.Added()
		if waiting {
			added = nil
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-added:
		}
		waiting = r.round(ctx)
	}
}

// round runs the groups of a page whose shards are not backing off. A
// page with none (every shard backing off, or unknown) is passed over for
// the next, up to reconcileSkipPages, or the end of the log. It reports
// whether it found hints but none it could send now.
func (r *reconciler) round(ctx context.Context) (waiting bool) {
	if r.env.hints.Count() == 0 || !r.env.allowed() {
		return false
	}
	for range reconcileSkipPages {
		page, err := r.nextPage()
		if err != nil {
			r.env.log.Error("reading the hint log", "err", err)
			return false
		}
		ran := false
		for _, g := range r.groupHints(page) {
			if !r.due(g.shard) {
				continue
			}
			ran = true
			err := r.reconcileGroup(ctx, g.shard, g.hints)
			if ctx.Err() != nil {
				return false // cut short by the stop: no failure of the shard's
			}
			r.settle(g.shard, err)
		}
		if ran {
			return false
		}
		if r.from == nil {
			return true
		}
	}
	return true
}

// nextPage reads the page at the cursor and moves the cursor past it (to
// the start again after the log's last page).
func (r *reconciler) nextPage() ([]hints.Hint, error) {
	page, more, err := r.env.hints.List(r.from, reconcilePage, reconcilePageMem)
	if err != nil {
		return nil, err
	}
	r.from = nil
	if more {
		r.from = append(bytes.Clone(page[len(page)-1].Key), 0)
	}
	return page, nil
}

// due reports whether shard is not backing off.
func (r *reconciler) due(shard ids.ShardID) bool {
	b, ok := r.backoff[shard]
	return !ok || !r.env.now().Before(b.until)
}

// settle sets shard's backoff after one of its groups: cleared by a group
// that succeeded, doubled (from reconcileBackoffMin, to
// reconcileBackoffMax) by one that failed.
func (r *reconciler) settle(shard ids.ShardID, err error) {
	if err == nil {
		delete(r.backoff, shard)
		return
	}
	if r.backoff == nil {
		r.backoff = map[ids.ShardID]shardBackoff{}
	}
	wait := min(max(2*r.backoff[shard].wait, reconcileBackoffMin), reconcileBackoffMax)
	r.backoff[shard] = shardBackoff{wait: wait, until: r.env.now().Add(wait)}
	r.env.log.Warn("tentative writes not reconciled: will retry", "shard", shard, "retry_in", wait, "err", err)
}

// shardGroup is the hints of one shard in a page.
type shardGroup struct {
	shard ids.ShardID
	hints []hints.Hint
}

// groupHints groups hints by the shard of their keys, in the order the
// shards first appear; a key whose shard is not known yet waits for a
// later round.
func (r *reconciler) groupHints(page []hints.Hint) []shardGroup {
	var groups []shardGroup
	at := map[ids.ShardID]int{}
	for _, h := range page {
		shard, ok := r.env.shardOf(h.Key)
		if !ok {
			continue
		}
		i, seen := at[shard]
		if !seen {
			i = len(groups)
			at[shard] = i
			groups = append(groups, shardGroup{shard: shard})
		}
		groups[i].hints = append(groups[i].hints, h)
	}
	return groups
}

// cutBatches cuts a group into batches of at most reconcileBatchOps ops
// and reconcileBatchBytes of keys and values (as the KV service counts
// them), each of at least one op.
func cutBatches(group []hints.Hint) [][]hints.Hint {
	var batches [][]hints.Hint
	start, size := 0, 0
	for i, h := range group {
		b := len(h.Key) + len(h.Value)
		if i > start && (i-start == reconcileBatchOps || size+b > reconcileBatchBytes) {
			batches = append(batches, group[start:i])
			start, size = i, 0
		}
		size += b
	}
	if start < len(group) {
		batches = append(batches, group[start:])
	}
	return batches
}

// outcomes counts a group's answered hints.
type outcomes struct{ applied, superseded, refused int }

// reconcileGroup proposes the hints of one shard, batch by batch, and
// stops at the first batch that fails: the shard is backing off then.
func (r *reconciler) reconcileGroup(ctx context.Context, shard ids.ShardID, group []hints.Hint) error {
	var o outcomes
	defer func() {
		if o != (outcomes{}) {
			r.env.log.Info("reconciled tentative writes", "shard", shard,
				"applied", o.applied, "superseded", o.superseded, "refused", o.refused)
		}
	}()
	for _, batch := range cutBatches(group) {
		if err := r.reconcileBatch(ctx, shard, batch, &o); err != nil {
			return err
		}
	}
	return nil
}

// reconcileBatch proposes batch and on the answer removes each hint whose
// version is unchanged. A batch of several refused as invalid is sent
// again op by op, so that one hint that can never apply does not hold the
// others back; one refused alone as invalid is dropped (refuse).
func (r *reconciler) reconcileBatch(ctx context.Context, shard ids.ShardID, batch []hints.Hint, o *outcomes) error {
	if ctx.Err() != nil {
		return ctx.Err() // the node stops: not a try
	}
	cctx, cancel := context.WithTimeout(ctx, reconcileTimeout)
	resp, err := r.env.send(cctx, reconcileOps(batch))
	cancel()
	switch {
	case err == nil:
		return r.answered(batch, resp, o)
	case status.Code(err) != codes.InvalidArgument:
		return err
	case len(batch) > 1:
		// One at a time: each valid op applies, whatever one refused
		// does; the first error (kept hints) backs the shard off.
		var first error
		for i := range batch {
			if err := r.reconcileBatch(ctx, shard, batch[i:i+1], o); err != nil && first == nil {
				first = err
			}
		}
		return first
	case !grpcapi.RefusedForGood(err):
		return err
	}
	if r.env.invalid == nil || r.env.invalid(batch[0]) == nil {
		// Refused elsewhere, valid here: the refusing node's limits
		// differ (a rolling restart changing them). Kept, and retried
		// with the shard's backoff, never dropped on another's word.
		return err
	}
	return r.refuse(shard, batch[0], err, o)
}

// reconcileOps are the ops that reconcile hs.
func reconcileOps(hs []hints.Hint) []*concordpb.Op {
	ops := make([]*concordpb.Op, len(hs))
	for i, h := range hs {
		ops[i] = &concordpb.Op{Type: concordpb.OpType_OP_PUT, Key: h.Key, Value: h.Value, TentativeVersion: h.Version}
		if h.Kind == hints.Delete {
			ops[i] = &concordpb.Op{Type: concordpb.OpType_OP_DELETE, Key: h.Key, TentativeVersion: h.Version}
		}
	}
	return ops
}

// answered removes the hints of a batch the shard answered, counting each
// as applied or superseded.
func (r *reconciler) answered(batch []hints.Hint, resp *concordpb.BatchResponse, o *outcomes) error {
	applied, superseded := 0, 0
	for i, h := range batch {
		if i < len(resp.GetResults()) && resp.GetResults()[i].GetOk() {
			applied++
		} else {
			superseded++
		}
		if _, err := r.env.hints.Remove(h.Key, h.Version); err != nil {
			return err
		}
	}
	r.reconciled.WithLabelValues("applied").Add(float64(applied))
	r.reconciled.WithLabelValues("superseded").Add(float64(superseded))
	o.applied, o.superseded = o.applied+applied, o.superseded+superseded
	return nil
}

// refuse drops h, which its shard refused alone as invalid: it can never
// apply, and kept it would be proposed for ever. Only if unchanged: a
// newer write of the key taken meanwhile is tried on its own.
func (r *reconciler) refuse(shard ids.ShardID, h hints.Hint, err error, o *outcomes) error {
	removed, rerr := r.env.hints.Remove(h.Key, h.Version)
	if rerr != nil || !removed {
		return rerr
	}
	key := h.Key
	if len(key) > droppedKeyShown {
		key = key[:droppedKeyShown]
	}
	r.env.log.Error("tentative write refused by its shard: it can never apply, dropped",
		"shard", shard, "key", fmt.Sprintf("%q", key), "key_bytes", len(h.Key), "value_bytes", len(h.Value), "err", err)
	r.reconciled.WithLabelValues("refused").Inc()
	o.refused++
	return nil
}

// tentativeWrites is the number of tentative writes this node holds, for
// its heartbeats: while it is LEAVING, the placement leader marks it
// REMOVED only once it reports 0 (or is dead), so that a drain does not
// throw away writes only this node can reconcile.
// tentativeWrites is the number of tentative writes this node holds, and
// those on their way into its hint log (grpcapi.KV.HoldsInProgress): what
// its heartbeat reports, after its own state (sendHeartbeat).
func (n *Node) tentativeWrites() uint64 {
	if n.hints == nil {
		return 0
	}
	// Those in progress first: a Hold raises the log's count before its
	// write leaves HoldsInProgress, so a write is in one or the other.
	var inProgress int64
	if n.kv != nil {
		inProgress = n.kv.HoldsInProgress()
	}
	return uint64(max(n.hints.Count()+inProgress, 0))
}

// failRemoved stops the node, which a heartbeat answer says was removed
// from the cluster, after saying what its hint log loses.
func (n *Node) failRemoved() {
	n.logLostHints()
	n.fail(removedError(uint64(n.ID())))
}

// logLostHints logs an ERROR if the node, removed from the cluster, holds
// tentative writes: only a node that serves proposes its hints, and a
// removed identity never serves again, so they are lost with its data dir.
// A live LEAVING node is removed only once it reports none
// (scheduler.Report.Tentative); one removed while it was DEAD, or from a
// binary older than the report's field, may still hold some.
func (n *Node) logLostHints() {
	if n.hints == nil || n.hints.Count() == 0 {
		return
	}
	c := n.hints.Count()
	n.log.Error(fmt.Sprintf("this node was removed holding %d tentative writes (available mode) never reconciled: "+
		"no removed node proposes them, and they are lost with this data dir", c),
		"tentative_writes", c, "tentative_bytes", n.hints.Bytes())
}
