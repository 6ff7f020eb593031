package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Goals from issue 11.
const (
	balanceGoal = 10 * time.Second
	rebuildGoal = 3 * time.Second
)

// report collects the measurements for markdown.
type report struct {
	header    []string
	footer    string
	preload   string
	moves     []moveRow
	baselines []window
	keys      *keysResult
	rebuilds  []rebuildRow
	errors    []string
}

func (r *report) markdown(p params) string {
	var b strings.Builder
	for _, h := range r.header {
		fmt.Fprintf(&b, "- %s\n", h)
	}
	fmt.Fprintf(&b, "- %s\n", r.footer)
	fmt.Fprintf(&b, "- settings: R=%d (meta shard %d from five nodes), 16 shards, status polled every %v, YCSB A: %d clients, uniform keys\n",
		p.replicas, p.metaReplicas, p.poll, p.clients)
	if r.preload != "" {
		fmt.Fprintf(&b, "- balance cluster: %s\n", r.preload)
	}
	r.movesTable(&b)
	r.ycsbTable(&b)
	r.keysTable(&b)
	r.rebuildTable(&b)
	if len(r.errors) > 0 {
		b.WriteString("\n**Errors:**\n\n")
		for _, e := range r.errors {
			fmt.Fprintf(&b, "- %s\n", strings.ReplaceAll(e, "\n", " "))
		}
	}
	return b.String()
}

func secs(d time.Duration) string {
	if d == 0 {
		return "—"
	}
	return fmt.Sprintf("%.1f", d.Seconds())
}

func (r *report) movesTable(b *strings.Builder) {
	if len(r.moves) == 0 {
		return
	}
	b.WriteString("\n#### Time to balance (seconds from the node's start / from `concord node remove`)\n\n")
	b.WriteString("| move | YCSB A running | shape (R voters, no learner) | replicas within one of mean | + leaders within one | removed process exited | goal < 10 s |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---|\n")
	met := 0
	var notes []string
	for _, m := range r.moves {
		verb := "remove"
		if m.add {
			verb = "add"
		}
		goal := "no"
		if m.err == "" && m.times.full > 0 && m.times.full < balanceGoal {
			goal = "yes"
			met++
		}
		if m.err != "" {
			goal = "failed: " + strings.ReplaceAll(m.err, "|", "/")
		}
		exited := "—"
		if !m.add {
			exited = secs(m.exited)
		}
		full := secs(m.times.full)
		if m.times.leadersMissed != "" {
			full = "not reached (note " + strconv.Itoa(len(notes)+1) + ")"
			notes = append(notes, fmt.Sprintf("%s %d→%d: %s", verb, m.from, m.to, m.times.leadersMissed))
		}
		fmt.Fprintf(b, "| %s %d→%d | %s | %s | %s | %s | %s | %s |\n", verb, m.from, m.to, yesNo(m.loaded),
			secs(m.times.shaped), secs(m.times.replicas), full, exited, goal)
	}
	fmt.Fprintf(b, "\nBalanced (replicas and leaders) within 10 s in %d of %d moves.\n", met, len(r.moves))
	for i, n := range notes {
		fmt.Fprintf(b, "\nNote %d: %s.\n", i+1, n)
	}
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func (r *report) ycsbTable(b *strings.Builder) {
	if len(r.baselines) == 0 {
		return
	}
	b.WriteString("\n#### YCSB A throughput (ops/s) with no move and during a move (join or remove until balanced)\n\n")
	b.WriteString("| nodes | no move | during add N→N+1 | during remove N+1→N |\n|---:|---|---|---|\n")
	for _, base := range r.baselines {
		add, rem := "—", "—"
		for _, m := range r.moves {
			if !m.loaded || m.load == nil {
				continue
			}
			if m.add && m.from == base.nodes {
				add = m.load.String()
			}
			if !m.add && m.to == base.nodes {
				rem = m.load.String()
			}
		}
		fmt.Fprintf(b, "| %d | %.0f (p99 %.1f ms, %d errors, %.0f s) | %s | %s |\n", base.nodes, base.mean, base.p99ms, base.errors, base.seconds, add, rem)
	}
}

func (r *report) keysTable(b *strings.Builder) {
	k := r.keys
	if k == nil {
		return
	}
	fmt.Fprintf(b, "\n#### Keys per node: %d keys over %d nodes\n\n", k.total, k.nodes)
	b.WriteString("| node | replicas (all shards) | keys held (counting replicas) | leaderships | keys led |\n|---:|---:|---:|---:|---:|\n")
	var held, led []float64
	for _, id := range k.up {
		fmt.Fprintf(b, "| %d | %d | %d | %d | %d |\n", id, k.replicas[id], k.held[id], k.leaders[id], k.led[id])
		held = append(held, float64(k.held[id]))
		led = append(led, float64(k.led[id]))
	}
	hs, ls := spreadOf(held), spreadOf(led)
	fmt.Fprintf(b, "\nKeys held: min %.0f, max %.0f, mean %.0f, stddev %.0f. Keys led: min %.0f, max %.0f, mean %.0f, stddev %.0f.\n",
		hs.min, hs.max, hs.mean, hs.stddev, ls.min, ls.max, ls.mean, ls.stddev)
	ids := make([]uint64, 0, len(k.shardKeys))
	for id := range k.shardKeys {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = fmt.Sprintf("%d:%d", id, k.shardKeys[id])
	}
	fmt.Fprintf(b, "Keys per shard (shard:keys): %s.\n", strings.Join(parts, " "))
}

func (r *report) rebuildTable(b *strings.Builder) {
	if len(r.rebuilds) == 0 {
		return
	}
	b.WriteString("\n#### Rebuild of a node that lost its disk (3 nodes, seconds from its restart)\n\n")
	b.WriteString("| value size | keys | data | rejoined (new id up) | every shard has a voter on it | all its replicas caught up | snapshot data received | goal < 3 s |\n")
	b.WriteString("|---:|---:|---:|---:|---:|---:|---:|---|\n")
	met := 0
	for _, rb := range r.rebuilds {
		goal := "no"
		if rb.err == "" && rb.caughtUp > 0 && rb.caughtUp < rebuildGoal {
			goal = "yes"
			met++
		}
		if rb.err != "" {
			goal = "failed: " + strings.ReplaceAll(rb.err, "|", "/")
		}
		fmt.Fprintf(b, "| %s | %d | %.0f MiB | %s | %s | %s | %.1f MiB | %s |\n", byteSize(rb.valueSize), rb.keys,
			float64(rb.keys*rb.valueSize)/(1<<20), secs(rb.joined), secs(rb.voters), secs(rb.caughtUp), rb.snapRecv/(1<<20), goal)
	}
	fmt.Fprintf(b, "\nRebuilt within 3 s in %d of %d runs.\n", met, len(r.rebuilds))
}

func byteSize(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<10) == 0:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}
