package node

import (
	"context"
	"fmt"
	"math"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/placement/scheduler"
)

// The space guard (docs/operations.md, "When a disk fills"). Pebble's
// write errors in the raft path stop the process (multiraft.Config.Fatal,
// exit 2), and writes are replicated, so every replica's disk fills at
// about the same time: without a guard the whole cluster would crash-loop
// and could not even take the deletes that free space. So each node
// watches the free bytes of its data dir's filesystem and, under its
// reserve, reports itself low in its heartbeats; the placement leader
// answers every heartbeat with the nodes that are low, and while any live
// node is (the space alarm, cluster-wide as etcd's NOSPACE) every node's
// front door refuses client writes that may add data (grpcapi.KV.SetNoSpace,
// kv.AddsData). Reads, deletes and the system's own writes (expiry sweep,
// session expiry, placement, conf changes) go on, and the alarm clears by
// itself once the disk has room again.

// ReserveDiskAuto is Config.ReserveDiskBytes's default: the smaller of
// defaultReserveCap and defaultReserveShare of the filesystem.
const ReserveDiskAuto = -1

const (
	defaultReserveCap   = 1 << 30 // 1 GiB
	defaultReserveShare = 20      // 1/20: 5 % of the filesystem
)

// resolveReserve is the reserve in bytes that setting (Config.
// ReserveDiskBytes) gives on a filesystem of total bytes: 0 turns the
// guard off.
func resolveReserve(setting int64, total uint64) uint64 {
	if setting == ReserveDiskAuto {
		return min(defaultReserveCap, total/defaultReserveShare)
	}
	return uint64(max(setting, 0))
}

// snapshotDiskMargin is the transport's SnapshotDiskMargin for the space
// guard's reserve: the same line, and no check (negative) while the guard
// is off (reserve 0), which the transport would read as its default.
func snapshotDiskMargin(reserve uint64) int64 {
	if reserve == 0 {
		return -1
	}
	return int64(min(reserve, math.MaxInt64))
}

// spaceMargin is how far above reserve free space must climb before a low
// node is low no more (scheduler.SpaceMargin: a tenth of the reserve, at
// least 64 MiB, at most the reserve). The placement scheduler keeps the
// same margin free above a node's reserve when it sends the node a
// replica, so one rule serves both.
func spaceMargin(reserve uint64) uint64 { return scheduler.SpaceMargin(reserve) }

// lowAfter is whether a node that was (or was not) low is low with free
// bytes and reserve: it becomes low under the reserve and stays low until
// free reaches the reserve plus spaceMargin. A reserve of 0 (the guard
// off) is never low.
func lowAfter(wasLow bool, free, reserve uint64) bool {
	switch {
	case reserve == 0:
		return false
	case free < reserve:
		return true
	case wasLow:
		return free < reserve+spaceMargin(reserve)
	}
	return false
}

// spaceGuard is one node's measurements and the alarm it applies.
type spaceGuard struct {
	reserve atomic.Uint64 // bytes; 0: the guard is off (set by Start)
	free    atomic.Uint64 // the last measurement's free bytes
	low     atomic.Bool   // this node is low by its own measurement
	alarm   atomic.Bool   // writes that add data are refused here now
	// full is the disk-low fault (Admin.DiskLow, faults.go): while set,
	// every measurement reads 0 free bytes.
	full atomic.Bool

	mu sync.Mutex
	// others are the nodes other than this one that the last heartbeat
	// answer listed low (guarded by mu). This node's own entry is left
	// out: its own measurement is newer.
	others []*concordpb.LowSpaceNode
	// reason is what the refusals say now, "" while the alarm is off
	// (guarded by mu).
	reason string
}

// diskSpace measures the free and total bytes of the filesystem holding
// the data dir (testHooks.diskSpace stands in for it in tests). Under the
// disk-low fault the free bytes read 0, here, so that the fault takes
// the path a full disk does: the low state, the heartbeat, the alarm.
func (n *Node) diskSpace() (free, total uint64, err error) {
	free, total, err = n.measureDisk()
	if err == nil && n.space.full.Load() {
		free = 0
	}
	return free, total, err
}

func (n *Node) measureDisk() (free, total uint64, err error) {
	if f := n.testHooks.diskSpace; f != nil {
		return f()
	}
	return statfs(n.cfg.DataDir)
}

// startSpaceGuard resolves the reserve from the data dir's filesystem and
// takes the first measurement, before the node serves clients. A
// filesystem that cannot be measured turns the guard off, said in a WARN.
func (n *Node) startSpaceGuard() {
	if n.cfg.ReserveDiskBytes == 0 {
		return
	}
	_, total, err := n.diskSpace()
	if err != nil {
		n.log.Warn("disk space guard off: cannot measure the data dir's filesystem", "dir", n.cfg.DataDir, "err", err)
		return
	}
	n.space.reserve.Store(resolveReserve(n.cfg.ReserveDiskBytes, total))
	n.checkSpace(context.Background())
}

// checkSpace measures the free bytes once (the space loop, about every
// second), moves this node in or out of the low state by lowAfter (a WARN
// on each change, and a heartbeat at once so the cluster learns of it),
// and applies the alarm, on each measurement while low so that its
// refusals say the free bytes of now.
func (n *Node) checkSpace(context.Context) {
	reserve := n.space.reserve.Load()
	if reserve == 0 {
		return
	}
	free, _, err := n.diskSpace()
	if err != nil {
		n.log.Debug("measure free disk space", "dir", n.cfg.DataDir, "err", err)
		return
	}
	n.space.free.Store(free)
	was := n.space.low.Load()
	low := lowAfter(was, free, reserve)
	if low == was {
		if low {
			// Still low: the refusals name the free bytes measured now,
			// not those of when it went low (applySpaceAlarm sets the
			// reason only if its text changed).
			n.applySpaceAlarm()
		}
		return
	}
	n.space.low.Store(low)
	if low {
		n.log.Warn("disk low on space: refusing writes that add data until it has more; deletes and reads still work",
			"dir", n.cfg.DataDir, "free", bytesText(free), "reserve", bytesText(reserve))
	} else {
		n.log.Warn("disk has space again: writes that add data are no longer refused for this node",
			"dir", n.cfg.DataDir, "free", bytesText(free), "reserve", bytesText(reserve))
	}
	n.applySpaceAlarm()
	n.placement.reportSoon()
}

// learnLowSpace takes the low nodes of a heartbeat answer and applies the
// alarm they and this node's own state make.
func (n *Node) learnLowSpace(low []*concordpb.LowSpaceNode) {
	var others []*concordpb.LowSpaceNode
	for _, l := range low {
		if ids.NodeID(l.GetNodeId()) != n.ID() {
			others = append(others, l)
		}
	}
	n.space.mu.Lock()
	n.space.others = others
	n.space.mu.Unlock()
	n.applySpaceAlarm()
}

// applySpaceAlarm sets the KV service's refusal from this node's own state
// (first: it is the freshest) and the other nodes the placement leader
// last named low, logging when the alarm turns on or off.
func (n *Node) applySpaceAlarm() {
	n.space.mu.Lock()
	defer n.space.mu.Unlock()
	reason := ""
	switch {
	case n.space.low.Load():
		reason = noSpaceReason(uint64(n.ID()), n.space.free.Load(), n.space.reserve.Load())
	case len(n.space.others) > 0:
		l := n.space.others[0]
		reason = noSpaceReason(l.GetNodeId(), l.GetFreeBytes(), l.GetReserveBytes())
	}
	if reason == n.space.reason {
		return
	}
	switch {
	case n.space.reason == "":
		n.log.Warn("space alarm on: refusing client writes that add data", "why", reason)
	case reason == "":
		n.log.Warn("space alarm off: client writes that add data are served again")
	}
	n.space.reason = reason
	n.space.alarm.Store(reason != "")
	if n.kv != nil {
		n.kv.SetNoSpace(reason)
	}
}

// noSpaceReason is what a refusal says (after kv.NoSpaceMark) while node
// is low with free bytes under reserve.
func noSpaceReason(node, free, reserve uint64) string {
	return fmt.Sprintf("node %d has %s free, under its --reserve-disk-bytes of %s; writes that add data are refused until it has more; deletes and reads still work",
		node, bytesText(free), bytesText(reserve))
}

// bytesText is b in the largest binary unit it reaches, one decimal.
func bytesText(b uint64) string {
	units := []string{"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	if b < 1<<10 {
		return fmt.Sprintf("%d B", b)
	}
	v, u := float64(b)/(1<<10), 0
	for v >= 1<<10 && u < len(units)-1 {
		v, u = v/(1<<10), u+1
	}
	return fmt.Sprintf("%.1f %s", v, units[u])
}

// lowSpaceNodes are the nodes the placement leader holds low on space
// in view v (scheduler.LowOnSpace: a low report received since it began
// observing, from a node not removed, replaced or judged dead by its
// silence), with the figures of their last reports (loads). A dead node's
// disk takes no writes, a removed one's never will again, and a report
// from before this placement leadership says nothing of the disk now:
// none may hold the cluster's writes back. In node id order, so
// every node names the same one first.
func lowSpaceNodes(v scheduler.View, loads map[ids.NodeID]load) []*concordpb.LowSpaceNode {
	var out []*concordpb.LowSpaceNode
	for id := range scheduler.LowOnSpace(v) {
		l := loads[id]
		if !l.diskLow {
			continue // a report newer than v's says it has room again
		}
		out = append(out, &concordpb.LowSpaceNode{NodeId: uint64(id), FreeBytes: l.diskFree, ReserveBytes: l.diskReserve})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetNodeId() < out[j].GetNodeId() })
	return out
}
