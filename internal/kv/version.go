package kv

import (
	"encoding/binary"
	"fmt"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/keys"
)

// Versions are what available mode (docs/architecture.md, "Available
// mode") orders writes by. A node that cannot reach its shard's quorum may
// keep a write as tentative, stamped with its hybrid logical clock, and
// propose it later as an op with tentative_version; that op must lose to
// every write made since, and win over every write made before.
//
// So every write of a versioned command (KVCommand.versioned, once the
// cluster's version allows version.Versions) is stored with the command's
// version: the shard's highest stamp (Unix ns of the proposers' clocks,
// the domain a node's hybrid logical clock counts in), or one above the
// shard's highest version if that is higher. The shard's highest version
// (ShardClock.version_high) is kept with its clock, in memory and in the
// applied-state record, so stamping a write costs no read: a linearizable
// write always applies, in log order, at a version above every version
// stored in the shard. A tentative write reconciled before it can
// therefore never make it vanish.
//
// A tentative write reconciled after a write of the same key wins if its
// version is higher: with clocks that agree, if it was made later. That is
// last-writer-wins on clocks, with its one weakness: a node whose clock
// runs ahead by d wins over writes made up to d after its tentative write
// (DESIGN.md's "never" holds for writes after the reconciliation). A
// tentative version counts as at most the shard's highest stamp (verCap),
// so no clock ahead, and no forged version, pushes the shard's versions
// past the proposers' clocks: the next write of a leader whose clock is
// right is newer.
//
// A reconciling op (reconcile) applies only if its version is above the
// key's: the version of the stored value (expired or not; 0 for a value
// written before versions), or, for an absent key, the version of the
// latest delete of a key in the same delete bucket (and never below the
// shard's first version: see beginVersion). A delete leaves no
// record of its own to compare with, and a record per deleted key would
// grow without bound, so each versioned delete raises its key's bucket
// (one of DeleteBuckets per shard, by a hash of the key) to its version:
// bounded state, at the price that a tentative write of an absent key
// also loses to a later delete of another key of its bucket. The expiry
// sweep's delete raises the bucket to the version of the value it removes
// (not to its own): the value's writer came then, and a tentative write
// older than that value must lose whether the sweep ran before its
// reconciliation or not.

// DeleteBuckets is the number of delete buckets of a shard: at most 64 Ki
// records of 8 bytes, and a later delete of one of about 1 in 64 Ki other
// keys makes a tentative write of an absent key lose.
const DeleteBuckets = 1 << 16

// deleteBucket is key's delete bucket: FNV-1a, folded to 16 bits. Fixed
// for ever: a change would misplace every bucket a shard holds.
func deleteBucket(key []byte) uint16 {
	h := uint32(2166136261) // FNV-1a, 32 bits, written out: hash/fnv allocates
	for _, c := range key {
		h = (h ^ uint32(c)) * 16777619
	}
	return uint16(h ^ h>>16)
}

// beginVersion sets the version the command's writes take (sm.ver) from
// the shard's highest stamp high, and the highest version a tentative
// write may bring in (sm.verCap: high itself, so no op, a node's clock
// ahead or a forged version, can push the shard's versions past the
// proposers' clocks). The version is above the shard's highest version and
// above every tentative version the command brings in (a node merging
// requests may put a reconciling batch and other writes in one command),
// so the command's other writes are newer than all of them.
//
// A shard versions every command from its first versioned one on, whether
// or not the command says so: during a rolling upgrade a leader that has
// not yet learned the cluster's version proposes unversioned commands, and
// a write without a version (0) or a delete that raised no bucket would
// lose to every tentative write. The shard's highest version is replicated
// state, so every replica decides alike; a binary below version.Versions
// stopped at the shard's first versioned entry. The first versioned
// command sets the shard's first version (versionsFrom) to the highest
// stamp before it (prevHigh; at least 1): every unversioned write came at
// or before it. A command on a shard without a clock (no stamp yet) writes
// no version.
func (sm *StateMachine) beginVersion(versioned bool, prevHigh, high int64, ops []*concordpb.Op) {
	sm.ver, sm.verCap = 0, 0
	if !(versioned || sm.clock.versionHigh != 0) || !sm.clock.found || high <= 0 {
		return
	}
	sm.verCap = uint64(high)
	v := max(sm.clock.versionHigh+1, uint64(high))
	for _, op := range ops {
		if tv := op.GetTentativeVersion(); tv != 0 {
			v = max(v, min(tv, sm.verCap)+1)
		}
	}
	if sm.clock.versionsFrom == 0 {
		sm.clock.versionsFrom = max(uint64(max(prevHigh, 0)), 1)
	}
	sm.clock.versionHigh = v
	sm.ver = v
}

// checkTentative refuses a command that carries a reconciling op while it
// writes no version (beginVersion): its replicas would have no versions to
// compare.
func (sm *StateMachine) checkTentative(ops []*concordpb.Op) error {
	if sm.ver != 0 {
		return nil
	}
	for _, op := range ops {
		if op.GetTentativeVersion() != 0 {
			return fmt.Errorf("tentative_version needs a versioned command")
		}
	}
	return nil
}

// reconcile applies op, a PUT or DELETE carrying tentative_version, if its
// version is above the key's (see above); ok in the result says whether it
// did. A value written before the shard's first version, or an absent key
// whose bucket no delete raised since, counts as written at that first
// version (the highest stamp of the unversioned writes): such a write may
// have come after the tentative one.
func (sm *StateMachine) reconcile(s *store, op *concordpb.Op) (*concordpb.OpResult, error) {
	tv := min(op.GetTentativeVersion(), sm.verCap)
	cur := s.raw.version
	if !s.stored {
		var err error
		if cur, err = s.bucketVersion(); err != nil {
			return nil, err
		}
	}
	if tv <= max(cur, sm.clock.versionsFrom) {
		return &concordpb.OpResult{}, nil // superseded
	}
	s.ver, s.tentative = tv, true // below the command's version (beginVersion)
	if op.GetType() == concordpb.OpType_OP_DELETE {
		return &concordpb.OpResult{Ok: true}, s.delete()
	}
	return &concordpb.OpResult{Ok: true}, s.set(op.GetValue(), 0)
}

// bucketVersion is the version of the latest delete in the key's bucket
// (0: none), as the batch has it.
func (s *store) bucketVersion() (uint64, error) {
	v, found, err := get(s.b, keys.DeleteBucket(s.shard, deleteBucket(s.key)))
	if err != nil || !found {
		return 0, err
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("kv: shard %d: delete bucket record of %d bytes", s.shard, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

// raiseBucket records a delete of the key at the store's version: a
// versioned command's is above every version in the shard, so it is
// written blind; a reconciled delete's may not be, so it is compared.
func (s *store) raiseBucket() error {
	if s.ver == 0 {
		return nil
	}
	if s.tentative {
		return s.raiseBucketTo(s.ver)
	}
	return s.setBucket(s.ver)
}

// raiseBucketTo raises the key's bucket to v unless it is there already.
func (s *store) raiseBucketTo(v uint64) error {
	cur, err := s.bucketVersion()
	if err != nil || cur >= v {
		return err
	}
	return s.setBucket(v)
}

func (s *store) setBucket(v uint64) error {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], v)
	return s.b.Set(keys.DeleteBucket(s.shard, deleteBucket(s.key)), b[:], nil)
}
