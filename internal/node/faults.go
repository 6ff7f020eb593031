package node

import (
	"errors"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/concord-kv/concord/internal/ids"
)

// The fault-injection hooks behind the Admin service (grpcapi.Faults). The
// Admin service refuses every call unless Config.EnableFaultInjection is set,
// so none of this runs outside test clusters.

// partition is a fault-injected network partition: the peer addresses this
// node can still reach. The transport (raft streams, snapshots) and the
// front door (node-to-node RPCs, both directions) consult it through
// Node.blocked.
type partition struct {
	// reachable is nil when there is no partition; the map is never
	// modified once stored.
	reachable atomic.Pointer[map[string]bool]
}

// blocked reports whether a partition cuts this node off from node.
func (n *Node) blocked(node ids.NodeID) bool {
	reach := n.partition.reachable.Load()
	if reach == nil || node == n.ID() {
		return false
	}
	addr, ok := n.book.resolve(node)
	return !ok || !(*reach)[addr]
}

// partitionFrom cuts this node off from every peer not in reachable and
// returns the ids of the peers now cut off.
func (n *Node) partitionFrom(reachable []string) []ids.NodeID {
	reach := map[string]bool{n.cfg.Addr: true}
	for _, a := range reachable {
		reach[a] = true
	}
	n.partition.reachable.Store(&reach)
	var blocked []ids.NodeID
	for _, d := range n.book.all() {
		if id := ids.NodeID(d.GetNodeId()); n.blocked(id) {
			blocked = append(blocked, id)
		}
	}
	n.log.Warn("fault injection: partitioned", "reachable", reachable, "blocked_nodes", blocked)
	return blocked
}

func (n *Node) heal() {
	n.partition.reachable.Store(nil)
	n.log.Warn("fault injection: healed")
}

// die ends the process: clean runs the graceful path of SIGTERM, unclean
// is kill -9. Either way it returns at once so the RPC can answer first.
func (n *Node) die(clean bool) {
	if clean {
		n.log.Warn("fault injection: clean die requested")
		go func() {
			n.Shutdown(5 * time.Second)
			os.Exit(0)
		}()
		return
	}
	n.log.Warn("fault injection: unclean die requested; exiting now")
	// Reply first so the caller sees success, then die as kill -9 would:
	// no deferred work, nothing flushed.
	go func() {
		time.Sleep(20 * time.Millisecond)
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	}()
}

// errGuardOff is the disk-low fault's refusal on a node whose space guard
// is off: no measurement is taken there, so the fault would change nothing.
var errGuardOff = errors.New("the disk space guard is off on this node (--reserve-disk-bytes 0, a data dir whose filesystem cannot be measured, or a node not started yet): a disk-low fault would change nothing")

// setDiskLow turns the disk-low fault on or off: the space guard's
// measurements read 0 free bytes while it is on. The space loop's next
// measurement (within a second) acts on it as on a full disk, and on the
// real figure again once it is off.
func (n *Node) setDiskLow(low bool) error {
	if n.space.reserve.Load() == 0 {
		return errGuardOff
	}
	n.space.full.Store(low)
	if low {
		n.log.Warn("fault injection: the disk reads as full (0 free bytes) until disk-low is turned off")
	} else {
		n.log.Warn("fault injection: the disk is measured again")
	}
	return nil
}
