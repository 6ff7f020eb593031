package kv

import (
	"github.com/cockroachdb/pebble/v2"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/keys"
)

// Reads outside apply (linearizable reads after their barrier, stale
// reads, the sweep) decide expiry on the serving node's clock, which the
// caller passes as nowMs (Unix milliseconds): this package reads no clock.
// A key whose expiry is at or before nowMs is absent.

// Get reads key of shard from r at nowMs: its value and expiry (Unix ms,
// 0: none), or found false when it is absent or expired.
func Get(r pebble.Reader, shard uint64, key []byte, nowMs int64) (value []byte, expireAt int64, found bool, err error) {
	rec, found, err := readRecord(r, keys.User(shard, key))
	if err != nil || !found || !live(rec.expireAt, nowMs) {
		return nil, 0, false, err
	}
	return rec.value, rec.expireAt, true, nil
}

// Page bounds one page of a scan. A page is a prefix of the range: it
// ends after Limit live pairs, or after the pair that brings its keys and
// values to MaxBytes or more (0: no byte bound; a page holds at least one
// pair, so a scan always advances). KeysOnly leaves the values out of the
// page: a walk of the keys (Redis SCAN, KEYS, DBSIZE) neither copies nor
// sends them, and they do not count against MaxBytes.
type Page struct {
	Limit    int
	MaxBytes int
	KeysOnly bool
}

// Scan reads one page of the live pairs of shard with keys in [start, end)
// in key order at nowMs; an empty end means no bound. Expired keys are
// skipped, so it returns page.Limit pairs whenever that many live ones
// exist and the byte bound does not end the page first. more reports that
// the page ended at a bound (pairs may follow it).
func Scan(r pebble.Reader, shard uint64, start, end []byte, page Page, nowMs int64) (kvs []*concordpb.KeyValue, more bool, err error) {
	size := 0
	full := func() bool { return len(kvs) >= page.Limit || (page.MaxBytes > 0 && size >= page.MaxBytes) }
	more, err = eachLive(r, shard, start, end, nowMs, full, func(key, value []byte, _ int64) {
		pair := &concordpb.KeyValue{Key: append([]byte(nil), key...)}
		if !page.KeysOnly {
			pair.Value = append([]byte(nil), value...)
		}
		size += len(pair.Key) + len(pair.Value)
		kvs = append(kvs, pair)
	})
	if err != nil {
		return nil, false, err
	}
	return kvs, more, nil
}

// eachLive hands add the live pairs of shard with keys in [start, end) at
// nowMs, in key order (an empty end: no bound), their key and value
// aliasing the iterator's, until full reports true before a pair: then
// more reports that the range held more (live or expired). Scan and Export
// both page through a shard this way.
func eachLive(r pebble.Reader, shard uint64, start, end []byte, nowMs int64, full func() bool, add func(key, value []byte, expireAt int64)) (more bool, err error) {
	lo, hi := keys.UserSpan(shard, start, end)
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return false, err
	}
	for ok := it.First(); ok; ok = it.Next() {
		if full() {
			more = true
			break
		}
		value, expireAt, _, err := decodeValue(it.Value())
		if err != nil {
			_ = it.Close()
			return false, err
		}
		if live(expireAt, nowMs) {
			add(keys.UserKey(shard, it.Key()), value, expireAt)
		}
	}
	return more, it.Close()
}

// ExpiredKey is one entry of a shard's expiry index: a user key and the
// time (Unix ms) the entry says it expires at. The entry may be stale (the
// key was replaced blindly since, with another expiry or none); the
// sweep's DELETE_EXPIRED, which carries AtMs, re-checks the key and
// removes a stale entry.
type ExpiredKey struct {
	Key  []byte
	AtMs int64
}

// Expired returns up to limit entries of shard's expiry index at or before
// nowMs, earliest first: the keys the sweep proposes to delete
// (OP_DELETE_EXPIRED, which re-checks each on the shard's clock).
func Expired(r pebble.Reader, shard uint64, nowMs int64, limit int) ([]ExpiredKey, error) {
	if nowMs <= 0 {
		return nil, nil
	}
	lo, hi := keys.ExpiredSpan(shard, nowMs)
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return nil, err
	}
	var out []ExpiredKey
	for ok := it.First(); ok && len(out) < limit; ok = it.Next() {
		at, key := keys.ExpiryEntry(shard, it.Key())
		out = append(out, ExpiredKey{Key: append([]byte(nil), key...), AtMs: at})
	}
	return out, it.Close()
}
