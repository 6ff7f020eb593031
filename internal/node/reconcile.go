package node

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/hints"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/version"
)

// The reconciler proposes the tentative writes this node holds (available
// mode: internal/hints, grpcapi/available.go) once their shards can commit
// them: every reconcileInterval, and at once after a write is held, it
// takes a page of hints, groups them by shard and proposes each group as
// one batch of PUTs and DELETEs carrying their versions (tentative_version)
// through the path a client's write to this node takes (KV.Reconcile: to
// the shard's leader). The state machine applies each op only if its
// version is above the key's, and says which applied. On the answer each
// hint whose version is unchanged is removed (a newer tentative write of
// the key taken meanwhile stays, for the next round). A failed round keeps
// its hints and waits reconcileBackoffMin, doubling to
// reconcileBackoffMax, until a round succeeds.

const (
	reconcileInterval   = 500 * time.Millisecond
	reconcilePage       = 256 // hints per round
	reconcileTimeout    = 5 * time.Second
	reconcileBackoffMin = time.Second
	reconcileBackoffMax = 30 * time.Second
)

// reconciler is the reconciler's state; only its goroutine touches it,
// but for the counters, which /metrics reads.
type reconciler struct {
	// from is where the next round's page starts (nil: the first hint),
	// so that a shard that cannot commit does not hold the others' hints
	// behind a page of its own for ever.
	from    []byte
	backoff time.Duration
	retryAt time.Time
	// reconciled counts the ops proposed and answered, by outcome:
	// applied, or superseded by a newer version.
	reconciled *prometheus.CounterVec
}

func newReconcileCounter() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "concord_reconciled_total",
		Help: "Tentative writes (available mode) this node proposed once their shard had a quorum, by outcome: applied, or superseded by a newer version of the key.",
	}, []string{"outcome"})
}

// heldTentative is told of each write the KV service held; the first
// after none were held is worth a WARN: a shard cannot commit.
func (n *Node) heldTentative(shard ids.ShardID, first bool) {
	if first {
		n.log.Warn(fmt.Sprintf("shard %d has no quorum within --available-timeout: holding tentative writes", shard),
			"shard", shard, "available_timeout", n.cfg.AvailableTimeout)
	}
}

// startReconciler runs the reconciler until the node stops.
func (n *Node) startReconciler() {
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		t := time.NewTicker(reconcileInterval)
		defer t.Stop()
		for {
			select {
			case <-n.stopC:
				return
			case <-t.C:
			case <-n.hints.Added():
			}
			n.reconcile()
		}
	}()
}

// reconcile runs one round, unless none is due: no hints, the cluster's
// version does not allow versions yet, or the last round failed and its
// backoff has not passed.
func (n *Node) reconcile() {
	r := &n.recon
	if n.hints.Count() == 0 || !n.kv.ClusterVersion().Allows(version.Versions) || time.Now().Before(r.retryAt) {
		return
	}
	page, err := n.hints.List(r.from, reconcilePage)
	if err != nil {
		n.log.Error("reading the hint log", "err", err)
		return
	}
	if len(page) < reconcilePage {
		r.from = nil // the end: the next round starts over
	} else {
		r.from = append(bytes.Clone(page[len(page)-1].Key), 0)
	}
	if len(page) == 0 {
		return
	}
	failed := false
	for shard, group := range n.groupHints(page) {
		if err := n.reconcileGroup(shard, group); err != nil {
			failed = true
			n.log.Warn("tentative writes not reconciled: will retry", "shard", shard, "writes", len(group), "err", err)
		}
	}
	n.recon.settle(failed)
}

// settle sets the backoff after a round: reset by a round that succeeded,
// doubled (from reconcileBackoffMin, to reconcileBackoffMax) by one that
// did not.
func (r *reconciler) settle(failed bool) {
	if !failed {
		r.backoff, r.retryAt = 0, time.Time{}
		return
	}
	r.backoff = min(max(2*r.backoff, reconcileBackoffMin), reconcileBackoffMax)
	r.retryAt = time.Now().Add(r.backoff)
}

// groupHints groups hints by the shard of their keys; a key whose shard
// is not known yet waits for a later round.
func (n *Node) groupHints(page []hints.Hint) map[ids.ShardID][]hints.Hint {
	table := n.backend().Table()
	groups := map[ids.ShardID][]hints.Hint{}
	for _, h := range page {
		d := table.Lookup(h.Key)
		if d == nil {
			continue
		}
		shard := ids.ShardID(d.GetShardId())
		groups[shard] = append(groups[shard], h)
	}
	return groups
}

// reconcileGroup proposes the hints of one shard as one batch, and on its
// answer removes each whose version is unchanged.
func (n *Node) reconcileGroup(shard ids.ShardID, group []hints.Hint) error {
	ops := make([]*concordpb.Op, len(group))
	for i, h := range group {
		op := &concordpb.Op{Type: concordpb.OpType_OP_PUT, Key: h.Key, Value: h.Value, TentativeVersion: h.Version}
		if h.Kind == hints.Delete {
			op = &concordpb.Op{Type: concordpb.OpType_OP_DELETE, Key: h.Key, TentativeVersion: h.Version}
		}
		ops[i] = op
	}
	ctx, cancel := context.WithTimeout(context.Background(), reconcileTimeout)
	defer cancel()
	resp, err := n.kv.Reconcile(ctx, ops)
	if err != nil {
		return err
	}
	applied, superseded := 0, 0
	for i, h := range group {
		if i < len(resp.GetResults()) && resp.GetResults()[i].GetOk() {
			applied++
		} else {
			superseded++
		}
		if _, err := n.hints.Remove(h.Key, h.Version); err != nil {
			return err
		}
	}
	n.recon.reconciled.WithLabelValues("applied").Add(float64(applied))
	n.recon.reconciled.WithLabelValues("superseded").Add(float64(superseded))
	n.log.Info("reconciled tentative writes", "shard", shard, "applied", applied, "superseded", superseded)
	return nil
}
