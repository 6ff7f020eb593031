// Package keys is the one place that defines what Concord stores in Pebble and
// under which key. Every other package builds keys through these functions.
//
// Layout (all integers big-endian, so keys sort numerically):
//
//	\x01 ident                      NodeIdent: this node's cluster and node id
//	\x01 addr  <node 8>             NodeDescriptor: the address book
//	\x01 seen  <node 8>             (empty) this node has received peer traffic from node
//	\x01 repl  <shard 8>            replica id of the shard replica hosted here
//	\x01 tomb  <shard 8>            highest replica id of the shard removed from here
//	\x01 jtok                       the join token this node sends until it has an identity
//	\x01 cver                       the highest cluster version this node has learned (4)
//	\x01 rstr                       (empty) a restore's load is under way: the user shards may hold part of a backup
//	\x01 rstd                       the SHA-256 digest of the backup file this node's bootstrap loaded (32)
//	\x01 hint <user key>            the newest tentative write of the key this node holds (available mode,
//	                                internal/hints): version (8), kind (1: put, 2: delete), the value
//	\x01 hclk                       the highest version the hint log's clock gave (8)
//
//	\x02 <shard 8> r h              raftpb.HardState
//	\x02 <shard 8> r l <index 8>    raftpb.Entry
//	\x02 <shard 8> r t              TruncatedState: the last entry removed from the log
//	\x02 <shard 8> s a              AppliedState: applied index and term
//	\x02 <shard 8> s c              raftpb.ConfState as of the applied index
//	\x02 <shard 8> s d              ShardDescriptor as of the applied index
//	\x02 <shard 8> s e <session 8>  SessionRecord
//	\x02 <shard 8> s k              the shard's clock for sessions: highest stamp, clock (8 + 8)
//	\x02 <shard 8> s m n <node 8>   (meta shard) NodeDescriptor
//	\x02 <shard 8> s m s <shard 8>  (meta shard) ShardDescriptor of every shard
//	\x02 <shard 8> s m c            (meta shard) MetaCounters
//	\x02 <shard 8> s m j <token>    (meta shard) node id registered by a join token (8)
//	\x02 <shard 8> s u <user key>   user value: a tag byte, the expiry if any, the version if any, the bytes (internal/kv)
//	\x02 <shard 8> s v <bucket 2>   the highest version of a delete of a key in the delete bucket (8; internal/kv)
//	\x02 <shard 8> s x <at 8> <user key>  (empty) the user key expires at Unix ms at: the sweep's index
//
// A shard's Raft keys ("r") and state-machine keys ("s") are disjoint spans of
// the shard's prefix. A snapshot carries the "s" span; installing one replaces
// the whole shard prefix atomically.
package keys

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

const (
	localPrefix   = 0x01
	replicaPrefix = 0x02
)

// Node-local keys.
var (
	identKey        = []byte{localPrefix, 'i', 'd', 'e', 'n', 't'}
	addrPrefix      = []byte{localPrefix, 'a', 'd', 'd', 'r'}
	seenPrefix      = []byte{localPrefix, 's', 'e', 'e', 'n'}
	hostedPrefix    = []byte{localPrefix, 'r', 'e', 'p', 'l'}
	tombstonePrefix = []byte{localPrefix, 't', 'o', 'm', 'b'}
	joinTokenKey    = []byte{localPrefix, 'j', 't', 'o', 'k'}
	clusterVerKey   = []byte{localPrefix, 'c', 'v', 'e', 'r'}
	restoringKey    = []byte{localPrefix, 'r', 's', 't', 'r'}
	restoredKey     = []byte{localPrefix, 'r', 's', 't', 'd'}
	hintPrefix      = []byte{localPrefix, 'h', 'i', 'n', 't'}
	hintClockKey    = []byte{localPrefix, 'h', 'c', 'l', 'k'}
)

// Hint is the key of the tentative write of user key this node holds
// (internal/hints). Node-local: no snapshot carries it.
func Hint(key []byte) []byte { return append(clone(hintPrefix), key...) }

// HintClock is the key of the highest version the hint log's clock gave
// (8 bytes), written with every hint: a restart with the wall clock
// stepped back still gives versions above every version it gave before,
// held or already reconciled.
func HintClock() []byte { return clone(hintClockKey) }

// HintSpan covers every Hint key.
func HintSpan() (start, end []byte) { return clone(hintPrefix), PrefixEnd(hintPrefix) }

// UserKeyOfHint decodes the user key from a Hint key.
func UserKeyOfHint(k []byte) []byte { return k[len(hintPrefix):] }

// Restoring is the key of the record that a restore's load of a backup
// into the user shards has begun and not completed.
func Restoring() []byte { return restoringKey }

// Restored is the key of the digest of the backup file a node's bootstrap
// loaded, written with its identity.
func Restored() []byte { return restoredKey }

// JoinToken is the key of the token a joining node sends with every join
// attempt, written before the first one.
func JoinToken() []byte { return joinTokenKey }

// ClusterVersion is the key of the highest cluster version this node has
// learned, which a binary below it must not start on.
func ClusterVersion() []byte { return clusterVerKey }

// Ident is the key of the node's identity record.
func Ident() []byte { return identKey }

// Address is the address-book key of a node.
func Address(node uint64) []byte { return appendU64(clone(addrPrefix), node) }

// AddressSpan covers the whole address book.
func AddressSpan() (start, end []byte) { return clone(addrPrefix), PrefixEnd(addrPrefix) }

// Seen marks that this node has received peer traffic from node.
func Seen(node uint64) []byte { return appendU64(clone(seenPrefix), node) }

// Hosted records that this node hosts a replica of shard.
func Hosted(shard uint64) []byte { return appendU64(clone(hostedPrefix), shard) }

// HostedSpan covers every Hosted key.
func HostedSpan() (start, end []byte) { return clone(hostedPrefix), PrefixEnd(hostedPrefix) }

// ShardOfHosted decodes the shard id from a Hosted key.
func ShardOfHosted(k []byte) uint64 { return binary.BigEndian.Uint64(k[len(hostedPrefix):]) }

// Tombstone records the highest replica id of shard removed from this node.
func Tombstone(shard uint64) []byte { return appendU64(clone(tombstonePrefix), shard) }

// TombstoneSpan covers every Tombstone key.
func TombstoneSpan() (start, end []byte) { return clone(tombstonePrefix), PrefixEnd(tombstonePrefix) }

// ShardOfTombstone decodes the shard id from a Tombstone key.
func ShardOfTombstone(k []byte) uint64 { return binary.BigEndian.Uint64(k[len(tombstonePrefix):]) }

// Per-shard keys.

func shardPrefix(shard uint64) []byte {
	return appendU64([]byte{replicaPrefix}, shard)
}

// ShardSpan covers everything stored for a shard replica: Raft and state machine.
func ShardSpan(shard uint64) (start, end []byte) {
	p := shardPrefix(shard)
	return p, PrefixEnd(p)
}

// RaftSpan covers the shard's Raft keys.
func RaftSpan(shard uint64) (start, end []byte) {
	p := append(shardPrefix(shard), 'r')
	return p, PrefixEnd(p)
}

// StateSpan covers the shard's state-machine keys: what a snapshot carries.
func StateSpan(shard uint64) (start, end []byte) {
	p := append(shardPrefix(shard), 's')
	return p, PrefixEnd(p)
}

// HardState is the key of the shard's raftpb.HardState.
func HardState(shard uint64) []byte { return append(shardPrefix(shard), 'r', 'h') }

// Truncated is the key of the shard's TruncatedState.
func Truncated(shard uint64) []byte { return append(shardPrefix(shard), 'r', 't') }

// LogEntry is the key of the shard's Raft log entry at index.
func LogEntry(shard, index uint64) []byte {
	return appendU64(append(shardPrefix(shard), 'r', 'l'), index)
}

// LogIndex decodes the index from a LogEntry key.
func LogIndex(k []byte) uint64 { return binary.BigEndian.Uint64(k[len(k)-8:]) }

// Applied is the key of the shard's AppliedState.
func Applied(shard uint64) []byte { return append(shardPrefix(shard), 's', 'a') }

// ConfState is the key of the shard's raftpb.ConfState.
func ConfState(shard uint64) []byte { return append(shardPrefix(shard), 's', 'c') }

// Descriptor is the key of the shard's own ShardDescriptor.
func Descriptor(shard uint64) []byte { return append(shardPrefix(shard), 's', 'd') }

// Session is the key of a client session's record in shard.
func Session(shard, session uint64) []byte {
	return appendU64(append(shardPrefix(shard), 's', 'e'), session)
}

// SessionOf decodes a Session key of shard into its session id.
func SessionOf(shard uint64, k []byte) uint64 {
	p, _ := SessionSpan(shard)
	if len(k) != len(p)+8 || !bytes.HasPrefix(k, p) {
		panic(fmt.Sprintf("keys: %x is not a session key of shard %d", k, shard))
	}
	return binary.BigEndian.Uint64(k[len(p):])
}

// Clock is the key of a user shard's session clock (internal/kv).
func Clock(shard uint64) []byte { return append(shardPrefix(shard), 's', 'k') }

// DeleteBucket is the key of the highest version at which a key of shard
// in delete bucket was deleted (package kv: what a tentative write of an
// absent key is compared with).
func DeleteBucket(shard uint64, bucket uint16) []byte {
	return binary.BigEndian.AppendUint16(append(shardPrefix(shard), 's', 'v'), bucket)
}

// SessionSpan covers every session record of shard.
func SessionSpan(shard uint64) (start, end []byte) {
	p := append(shardPrefix(shard), 's', 'e')
	return p, PrefixEnd(p)
}

// MetaNode is the key of a node's descriptor in the meta shard.
func MetaNode(meta, node uint64) []byte {
	return appendU64(append(shardPrefix(meta), 's', 'm', 'n'), node)
}

// MetaNodeSpan covers every node descriptor in the meta shard.
func MetaNodeSpan(meta uint64) (start, end []byte) {
	p := append(shardPrefix(meta), 's', 'm', 'n')
	return p, PrefixEnd(p)
}

// MetaShard is the key of a shard's descriptor in the meta shard.
func MetaShard(meta, shard uint64) []byte {
	return appendU64(append(shardPrefix(meta), 's', 'm', 's'), shard)
}

// MetaShardSpan covers every shard descriptor in the meta shard.
func MetaShardSpan(meta uint64) (start, end []byte) {
	p := append(shardPrefix(meta), 's', 'm', 's')
	return p, PrefixEnd(p)
}

// MetaCounters is the key of the meta shard's id allocator.
func MetaCounters(meta uint64) []byte { return append(shardPrefix(meta), 's', 'm', 'c') }

// MetaJoinToken is the key of the node id a join token registered, in the
// meta shard.
func MetaJoinToken(meta uint64, token []byte) []byte {
	return append(append(shardPrefix(meta), 's', 'm', 'j'), token...)
}

// userPrefix is the prefix of shard's user data.
func userPrefix(shard uint64) []byte { return append(shardPrefix(shard), 's', 'u') }

// User is the storage key of a user key in shard, built in one allocation:
// every linearizable GET makes one (the prefix, then a copy, made two).
func User(shard uint64, key []byte) []byte {
	k := make([]byte, 0, 1+8+2+len(key))
	k = appendU64(append(k, replicaPrefix), shard)
	return append(append(k, 's', 'u'), key...)
}

// UserSpan is the storage span of user keys in [start, end) of shard; an empty
// end means the end of the shard.
func UserSpan(shard uint64, start, end []byte) (lo, hi []byte) {
	lo = User(shard, start)
	if len(end) == 0 {
		return lo, PrefixEnd(userPrefix(shard))
	}
	return lo, User(shard, end)
}

// UserKey strips the storage prefix from a User key.
func UserKey(shard uint64, k []byte) []byte {
	n := len(userPrefix(shard))
	if len(k) < n {
		panic(fmt.Sprintf("keys: %x is not a user key of shard %d", k, shard))
	}
	return k[n:]
}

// expiryPrefix is the prefix of shard's expiry index.
func expiryPrefix(shard uint64) []byte { return append(shardPrefix(shard), 's', 'x') }

// Expiry is the expiry-index key recording that user key of shard expires at
// atMs (Unix milliseconds, positive). The index sorts by time, so the keys
// expired by a time are one span (ExpiredSpan). It lies in the shard's state
// span, so snapshots, replica destruction and excision cover it.
func Expiry(shard uint64, atMs int64, key []byte) []byte {
	k := appendU64(expiryPrefix(shard), uint64(atMs))
	return append(k, key...)
}

// ExpiredSpan covers the expiry-index keys of shard with a time at or before
// atMs.
func ExpiredSpan(shard uint64, atMs int64) (lo, hi []byte) {
	return expiryPrefix(shard), appendU64(expiryPrefix(shard), uint64(atMs)+1)
}

// ExpiryEntry decodes an Expiry key of shard into its time and user key.
func ExpiryEntry(shard uint64, k []byte) (atMs int64, key []byte) {
	n := len(expiryPrefix(shard))
	if len(k) < n+8 {
		panic(fmt.Sprintf("keys: %x is not an expiry key of shard %d", k, shard))
	}
	return int64(binary.BigEndian.Uint64(k[n:])), k[n+8:]
}

// PrefixEnd returns the smallest key greater than every key with prefix p.
func PrefixEnd(p []byte) []byte {
	end := clone(p)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] != 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	panic("keys: prefix of all 0xff has no end")
}

func appendU64(b []byte, v uint64) []byte { return binary.BigEndian.AppendUint64(b, v) }

func clone(b []byte) []byte { return append([]byte(nil), b...) }
