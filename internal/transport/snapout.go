package transport

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
)

// errSnapshotBackoff: a snapshot is not sent to a peer that refused one
// for want of room until its backoff has passed.
var errSnapshotBackoff = errors.New("transport: peer refused a snapshot recently")

// snapBackoffMin and snapBackoffMax bound the wait after a refused
// snapshot: it doubles with each refusal in a row.
const (
	snapBackoffMin = time.Second
	snapBackoffMax = 30 * time.Second
	// snapBusyWait is the wait after a busy refusal: a few ticks, far
	// below a stream's length, so a freed slot soon finds a sender.
	snapBusyWait = 300 * time.Millisecond
)

// snapshotBackoff spaces out the snapshots sent to peers that refused one
// for want of room (staged snapshots, disk, size: refusedNoRoom). Raft
// tries again at the next heartbeat answer after a failed snapshot (every
// tick), and each try took a storage snapshot, opened a stream and sent
// its first chunk only to be refused again: ten a second, and as many
// warnings. Within the backoff a snapshot fails at once, without a
// stream.
//
// A refusal because every receive slot is taken (refusedBusy) starts no
// backoff: slots free as soon as any stream ends, and a node catching up
// many shards from several leaders refuses those that lose the race for
// one; backed off, they would wait up to snapBackoffMax while slots sat
// idle, and hold back the node's other shards with them. An unmarked
// ResourceExhausted (a receiver from before the marks) starts none
// either: before the staged, size and disk bounds came with the marks the
// only one a receiver sent was that busy refusal (and gRPC's own for a
// message past the receiver's limit, which no backoff cures), so
// treating it as busy keeps what those receivers had, raft's retry at
// each heartbeat answer.
//
// A busy refusal still holds the peer off for a short fixed wait (busy,
// snapBusyWait), not doubled: raft asks again at each heartbeat answer
// (every tick), and each try scans and rate-charges up to a chunk before
// the receiver's refusal is seen, so during a mass recovery the doomed
// tries of many shards would queue on the node's snapshot rate limit
// ahead of the streams that were taken.
type snapshotBackoff struct {
	min, max time.Duration // snapBackoffMin, snapBackoffMax; tests shorten them
	busy     time.Duration // snapBusyWait; tests change it
	mu       sync.Mutex
	peers    map[ids.NodeID]backoffState // guarded by mu
}

type backoffState struct {
	until time.Time     // no snapshot to the peer before
	next  time.Duration // the wait after its next refusal
}

// wait fails with errSnapshotBackoff while node's backoff lasts.
func (b *snapshotBackoff) wait(node ids.NodeID) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if left := time.Until(b.peers[node].until); left > 0 {
		return fmt.Errorf("%w: node %d, next try in %v", errSnapshotBackoff, node, left.Round(time.Millisecond))
	}
	return nil
}

// note records a stream's outcome: a refusal for want of room starts or
// doubles node's backoff; any other refusal (busy) holds the peer off for
// the short busy wait and leaves the doubling as it is, as it says
// nothing about room; anything else ends it.
func (b *snapshotBackoff) note(node ids.NodeID, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if status.Code(err) != codes.ResourceExhausted {
		delete(b.peers, node)
		return
	}
	if b.peers == nil {
		b.peers = map[ids.NodeID]backoffState{}
	}
	if refusalReason(err) != refusedNoRoom {
		st := b.peers[node]
		if until := time.Now().Add(b.busy); until.After(st.until) {
			st.until = until
		}
		b.peers[node] = st
		return
	}
	wait := max(b.peers[node].next, b.min)
	b.peers[node] = backoffState{until: time.Now().Add(wait), next: min(2*wait, b.max)}
}

// snapshotBusy reports whether err is a receiver's refusal because every
// receive slot was taken: ordinary contention, which raft retries.
func snapshotBusy(err error) bool { return refusalReason(err) == refusedBusy }

// streamStatus is the error of a failed Send on s: io.EOF says the
// receiver ended the stream, whose status (a refusal) CloseAndRecv has.
func streamStatus(s concordpb.RaftTransport_SendSnapshotClient, err error) error {
	if !errors.Is(err, io.EOF) {
		return err
	}
	_, err = s.CloseAndRecv()
	if err == nil {
		err = errors.New("transport: snapshot stream ended by the receiver")
	}
	return err
}
