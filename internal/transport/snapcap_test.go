package transport

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/storage"
)

// snapHeader is the MsgSnap of the test snapshots: shard 3 at 10/2, to
// node 2's replica 2.
func snapHeader() *pb.Message {
	return &pb.Message{Type: pb.MsgSnap.Enum(), To: new(uint64(2)), From: new(uint64(1)),
		Snapshot: &pb.Snapshot{Metadata: &pb.SnapshotMetadata{Index: new(uint64(10)), Term: new(uint64(2))}}}
}

// snapSender starts node 1's transport, sending snapshots to addr (node
// 2) in chunks of at most chunkBytes.
func snapSender(t *testing.T, addr string, chunkBytes int) *Transport {
	t.Helper()
	a := New(Config{ClusterID: 7, NodeID: 1, SnapshotChunkBytes: chunkBytes,
		Resolve: func(n ids.NodeID) (string, bool) { return addr, n == 2 }}, nil)
	a.SetReceiver(&recorder{})
	t.Cleanup(a.Stop)
	return a
}

// staged is how many received snapshots have files on b's engine.
func staged(b *Transport) int { return b.sink.(*storage.Engine).StagedSnapshots() }

// refused reports whether err is a ResourceExhausted refusal saying what.
func refused(err error, what string) bool {
	return status.Code(err) == codes.ResourceExhausted && strings.Contains(status.Convert(err).Message(), what)
}

// noRoom reports whether err is a ResourceExhausted refusal saying what,
// marked as one for want of room (which backs the sender off).
func noRoom(err error, what string) bool {
	return refused(err, what) && refusalReason(err) == refusedNoRoom
}

// TestStagedSnapshotsBoundedNodeWide (hsnapcap): a received snapshot is
// staged on disk before raft sees its header, and nothing bounded how many
// such snapshots raft had not taken yet: a peer could fill the disk with
// them. Past MaxStagedSnapshots a new stream is refused (ResourceExhausted)
// before it is read and stages nothing; once raft takes or drops one (here
// the recorder, which never does, discards it) a snapshot is taken again.
func TestStagedSnapshotsBoundedNodeWide(t *testing.T) {
	b, addr, rec := snapReceiver(t, Config{MaxStagedSnapshots: 2})
	for i := range 2 {
		if err := goodSnapshot(t, addr); err != nil {
			t.Fatalf("snapshot %d within the bound: %v", i, err)
		}
	}
	for i := range 3 {
		if err := goodSnapshot(t, addr); !noRoom(err, "staged on disk already") {
			t.Fatalf("snapshot %d past the bound: %v; want ResourceExhausted", 3+i, err)
		}
	}
	if n, files := staged(b), stagedFiles(t, b); n != 2 || len(files) != 2 {
		t.Fatalf("%d staged snapshots, files %v; want the 2 within the bound", n, files)
	}
	rec.mu.Lock()
	rec.snaps[0].Discard()
	rec.snaps = rec.snaps[1:]
	rec.mu.Unlock()
	if err := goodSnapshot(t, addr); err != nil {
		t.Fatalf("a snapshot once one was discarded: %v", err)
	}
	if n := staged(b); n != 2 {
		t.Fatalf("%d staged snapshots, want 2", n)
	}
}

// TestOversizedSnapshotStreamRefused (hsnapcap): nothing bounded the size
// of one snapshot stream, and its header declares none (the sender
// iterates the shard as it sends). A stream past MaxSnapshotBytes is ended
// with ResourceExhausted, the files it staged so far are removed, and the
// receiver takes a snapshot within the bound afterwards.
func TestOversizedSnapshotStreamRefused(t *testing.T) {
	b, addr, rec := snapReceiver(t, Config{MaxSnapshotBytes: 500})
	a := snapSender(t, addr, 64) // several chunks staged before the bound
	// Far more than the bound: the sender is still sending when the
	// receiver ends the stream, and must report the refusal, not io.EOF.
	if err := a.sendSnapshot(2, 3, snapHeader(), tinyPairs(100000)); !noRoom(err, "past 500 bytes") {
		t.Fatalf("a snapshot past MaxSnapshotBytes: %v; want ResourceExhausted", err)
	}
	waitFor(t, "no snapshot being received", func() bool { return b.receiving() == 0 })
	if n, files := staged(b), stagedFiles(t, b); n != 0 || len(files) != 0 {
		t.Fatalf("%d staged snapshots, files %v left by the refused stream", n, files)
	}
	a.snapBackoff.min = 0 // the refusal backed the sender off; not the point here
	a.snapBackoff.note(2, nil)
	if err := a.sendSnapshot(2, 3, snapHeader(), tinyPairs(10)); err != nil {
		t.Fatalf("a snapshot within MaxSnapshotBytes: %v", err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.snaps) != 1 {
		t.Fatalf("%d snapshots delivered; want only the one within the bound", len(rec.snaps))
	}
}

// TestSnapshotRefusedBelowDiskMargin (hsnapcap): a snapshot that would
// leave less than SnapshotDiskMargin free on the data dir's file system is
// refused before anything is staged, with an error that says so.
func TestSnapshotRefusedBelowDiskMargin(t *testing.T) {
	b, addr, rec := snapReceiver(t, Config{SnapshotDiskMargin: 1 << 62}) // more than any disk has
	if err := goodSnapshot(t, addr); !noRoom(err, "SnapshotDiskMargin") {
		t.Fatalf("a snapshot with the disk below the margin: %v; want ResourceExhausted", err)
	}
	if n, files := staged(b), stagedFiles(t, b); n != 0 || len(files) != 0 {
		t.Fatalf("%d staged snapshots, files %v after the refusal", n, files)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.snaps) != 0 {
		t.Fatalf("%d snapshots delivered", len(rec.snaps))
	}
}

// TestRefusedSnapshotSenderBacksOff (hsnapcap): raft tries a failed
// snapshot again at the next heartbeat answer (every tick), and each try
// opened a stream, sent a chunk and was refused again. After a refusal
// for want of room (here MaxStagedSnapshots) the sender now sends no snapshot to that peer until
// its backoff passes, failing at once without a stream, and sends again
// once it has.
func TestRefusedSnapshotSenderBacksOff(t *testing.T) {
	_, addr, rec := snapReceiver(t, Config{MaxStagedSnapshots: 1})
	a := snapSender(t, addr, 0)
	a.snapBackoff.min, a.snapBackoff.max = time.Hour, time.Hour
	if err := a.sendSnapshot(2, 3, snapHeader(), tinyPairs(1)); err != nil {
		t.Fatalf("first snapshot: %v", err)
	}
	if err := a.sendSnapshot(2, 3, snapHeader(), tinyPairs(1)); !noRoom(err, "staged on disk already") {
		t.Fatalf("second snapshot, past the receiver's bound: %v; want ResourceExhausted", err)
	}
	rec.mu.Lock()
	rec.snaps[0].Discard() // the receiver has room again: only the backoff stops the sender
	rec.snaps = nil
	rec.mu.Unlock()
	for i := range 5 {
		if err := a.sendSnapshot(2, 3, snapHeader(), tinyPairs(1)); !errors.Is(err, errSnapshotBackoff) {
			t.Fatalf("try %d right after the refusal: %v; want the sender's backoff", i, err)
		}
	}
	rec.mu.Lock()
	n := len(rec.snaps)
	rec.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d snapshots delivered during the backoff", n)
	}
	a.snapBackoff.mu.Lock()
	st := a.snapBackoff.peers[2]
	st.until = time.Now() // the backoff passed
	a.snapBackoff.peers[2] = st
	a.snapBackoff.mu.Unlock()
	if err := a.sendSnapshot(2, 3, snapHeader(), tinyPairs(1)); err != nil {
		t.Fatalf("a snapshot after the backoff: %v", err)
	}
}

// TestStagedCapHoldsForConcurrentStreams (review of hsnapcap): the staged
// cap was checked by reading the count, which a stream's writer raised
// only once its first chunk had come and passed its checks, so streams
// arriving together all passed the check and up to MaxInboundSnapshots-1
// past the cap were staged. A stream now reserves its count in the check.
// Eight streams at once against a cap of two: each stream that passed the
// check waits there (snapCounted) until every one has passed or been
// refused; exactly two pass, and no more than two are ever staged.
func TestStagedCapHoldsForConcurrentStreams(t *testing.T) {
	const streams, capStaged = 8, 2
	b, addr, _ := snapReceiver(t, Config{MaxInboundSnapshots: streams, MaxStagedSnapshots: capStaged})
	var passed atomic.Int32
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free) // before the receiver stops: its handlers must not wait for ever
	b.snapCounted = func() { passed.Add(1); <-release }
	ended := make(chan error, streams)
	var opened []concordpb.RaftTransport_SendSnapshotClient
	for range streams {
		// Bare: a refused stream may be ended before a first chunk is sent
		// (Send would fail with io.EOF); those that pass get theirs below.
		s, _ := openSnapshot(t, addr, true)
		opened = append(opened, s)
		go func() { ended <- s.RecvMsg(&concordpb.SnapshotAck{}) }()
	}
	var refusals []error
	waitFor(t, "every stream past the staged check or refused", func() bool {
		for {
			select {
			case err := <-ended:
				refusals = append(refusals, err)
			default:
				return int(passed.Load())+len(refusals) == streams
			}
		}
	})
	if n := passed.Load(); n != capStaged {
		t.Fatalf("%d of %d concurrent streams passed the staged check; want the cap, %d", n, streams, capStaged)
	}
	for _, err := range refusals {
		if !noRoom(err, "staged on disk already") {
			t.Fatalf("a stream past the cap: %v; want ResourceExhausted", err)
		}
	}
	free()
	for _, s := range opened {
		// Not done: a stream that passed stays open, staging. One refused
		// fails with io.EOF, or not at all if the chunk went out first.
		if err := s.Send(firstChunk(t)); err != nil && !errors.Is(err, io.EOF) {
			t.Fatal(err)
		}
	}
	waitFor(t, "the two streams staging", func() bool { return len(stagedFiles(t, b)) == capStaged })
	if n := staged(b); n != capStaged {
		t.Fatalf("%d staged snapshots with %d streams staging; want %d", n, capStaged, capStaged)
	}
}

// TestStagedReservationReleased: a stream refused after it reserved its
// place among MaxStagedSnapshots (here it ends before its first chunk)
// gives the place back; a leak would shut the node out of snapshots once
// MaxStagedSnapshots such streams had come.
func TestStagedReservationReleased(t *testing.T) {
	b, addr, _ := snapReceiver(t, Config{MaxStagedSnapshots: 1})
	for i := range 3 {
		s, _ := openSnapshot(t, addr, true)
		check(t, s.CloseSend())
		if err := s.RecvMsg(&concordpb.SnapshotAck{}); err == nil || refused(err, "staged on disk already") {
			t.Fatalf("stream %d without a chunk: %v; want it refused for want of one", i, err)
		}
		waitFor(t, "the stream's place given back", func() bool { return staged(b) == 0 && b.receiving() == 0 })
	}
	if err := goodSnapshot(t, addr); err != nil {
		t.Fatalf("a snapshot after the refused streams: %v", err)
	}
}

// TestBusyReceiverDoesNotBackOffSender (review of hsnapcap): every
// ResourceExhausted backed the sender off the node for 1 s doubling to
// 30 s, all its shards with it, the refusal of a node whose receive slots
// are all taken too: ordinary contention while a replaced node catches up
// dozens of shards from several leaders, so a sender that lost the race
// for a slot waited while freed slots sat idle. That refusal is marked
// busy now and starts no backoff: once a slot is free the next try (raft
// asks at each heartbeat answer) is sent.
func TestBusyReceiverDoesNotBackOffSender(t *testing.T) {
	b, addr, rec := snapReceiver(t, Config{MaxInboundSnapshots: 1})
	a := snapSender(t, addr, 0)
	a.snapBackoff.min, a.snapBackoff.max = time.Hour, time.Hour // a backoff would stop the try below
	_, cancel := openSnapshot(t, addr, false)                   // holds the one receive slot
	waitFor(t, "the receive slot taken", func() bool { return b.receiving() == 1 })
	err := a.sendSnapshot(2, 3, snapHeader(), tinyPairs(1))
	if !refused(err, "being received already") || refusalReason(err) != refusedBusy {
		t.Fatalf("a snapshot with every receive slot taken: %v (reason %q); want ResourceExhausted, busy", err, refusalReason(err))
	}
	cancel()
	waitFor(t, "the receive slot free", func() bool { return b.receiving() == 0 })
	// Within the short busy wait (snapBusyWait) the try fails at once;
	// past it, well before the hour a backoff would last, it goes through.
	var last error
	waitFor(t, "a snapshot once a receive slot was free", func() bool {
		last = a.sendSnapshot(2, 3, snapHeader(), tinyPairs(1))
		if last != nil && !errors.Is(last, errSnapshotBackoff) {
			t.Fatalf("a snapshot once a receive slot was free: %v", last)
		}
		return last == nil
	})
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.snaps) != 1 {
		t.Fatalf("%d snapshots delivered; want 1", len(rec.snaps))
	}
}

// TestSnapshotBackoffByRefusal: only a refusal marked as one for want of
// room starts or doubles a sender's backoff. A busy refusal leaves the
// backoff as it was (the doubling continues with the next refusal for
// room); an unmarked ResourceExhausted, all a receiver from before the
// marks sends (its only one said its slots were busy), starts none; any
// other outcome ends it.
func TestSnapshotBackoffByRefusal(t *testing.T) {
	old := status.Error(codes.ResourceExhausted, "transport: 8 snapshots being received already")
	for _, c := range []struct {
		name    string
		err     error
		backoff bool
	}{
		{"no room", refusal(refusedNoRoom, "transport: full"), true},
		{"no room, wrapped", fmt.Errorf("send: %w", refusal(refusedNoRoom, "transport: full")), true},
		{"busy", refusal(refusedBusy, "transport: busy"), false},
		{"unmarked, from an older receiver", old, false},
		{"another domain's mark", otherMark(t), false},
		{"not a refusal", status.Error(codes.Unavailable, "down"), false},
	} {
		b := snapshotBackoff{min: time.Hour, max: 4 * time.Hour}
		b.note(2, c.err)
		if got := errors.Is(b.wait(2), errSnapshotBackoff); got != c.backoff {
			t.Errorf("%s: backoff %v, want %v", c.name, got, c.backoff)
		}
	}
	b := snapshotBackoff{min: time.Hour, max: 4 * time.Hour}
	b.note(2, refusal(refusedNoRoom, "x"))
	b.note(2, refusal(refusedBusy, "x"))
	b.note(2, old)
	if st := b.peers[2]; st.next != 2*time.Hour {
		t.Fatalf("after a refusal for room and two busy ones the next wait is %v; want 2h, the doubling kept", st.next)
	}
	b.note(2, nil)
	if err := b.wait(2); err != nil {
		t.Fatalf("after a snapshot went through: %v", err)
	}
}

// TestBusyRefusalWaitsShortly: a busy refusal holds the peer off for the
// short busy wait only, without starting the doubling, so the tries of
// many shards do not queue on the snapshot rate limit while a receiver's
// slots are taken, and a refusal for room then starts at the minimum.
func TestBusyRefusalWaitsShortly(t *testing.T) {
	b := snapshotBackoff{min: time.Hour, max: 4 * time.Hour, busy: time.Hour}
	b.note(2, refusal(refusedBusy, "transport: busy"))
	if !errors.Is(b.wait(2), errSnapshotBackoff) {
		t.Fatal("no wait after a busy refusal")
	}
	if st := b.peers[2]; st.next != 0 {
		t.Fatalf("a busy refusal set the next backoff to %v; want none started", st.next)
	}
	b.note(2, refusal(refusedNoRoom, "transport: full"))
	if st := b.peers[2]; st.next != 2*time.Hour {
		t.Fatalf("a refusal for room after a busy one: next %v; want 2h (started at the minimum)", st.next)
	}
	b = snapshotBackoff{min: time.Hour, max: 4 * time.Hour, busy: time.Millisecond}
	b.note(2, refusal(refusedBusy, "transport: busy"))
	waitFor(t, "the busy wait over", func() bool { return b.wait(2) == nil })
}

// otherMark is a ResourceExhausted whose ErrorInfo has the transport's
// no-room reason in another domain: not the transport's mark.
func otherMark(t *testing.T) error {
	st, err := status.New(codes.ResourceExhausted, "quota").WithDetails(&errdetails.ErrorInfo{Reason: refusedNoRoom, Domain: "example.com"})
	check(t, err)
	return st.Err()
}
