package kv

import (
	"github.com/cockroachdb/pebble/v2"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/keys"
)

// Export reads the live records of shard with keys at or after start, in
// key order, from r at nowMs, until about maxBytes of keys and values are
// read (at least one record): what an online backup streams, one chunk at a
// time. Keys expired at nowMs are left out. more reports that records may
// follow the last one returned.
func Export(r pebble.Reader, shard uint64, start []byte, maxBytes int, nowMs int64) (recs []*concordpb.BackupRecord, more bool, err error) {
	size := 0
	full := func() bool { return size >= maxBytes && len(recs) > 0 }
	more, err = eachLive(r, shard, start, nil, nowMs, full, func(key, value []byte, expireAt int64) {
		recs = append(recs, &concordpb.BackupRecord{
			Key: append([]byte(nil), key...), Value: append([]byte(nil), value...), ExpireAtUnixMs: expireAt,
		})
		size += len(key) + len(value)
	})
	if err != nil {
		return nil, false, err
	}
	return recs, more, nil
}

// Load writes a restored key into shard's state as applying a PUT would
// (the value's envelope, and the expiry index entry if it expires): for a
// fresh shard that a node bootstraps from a backup, whose state is empty.
// Later raft snapshots carry it like any applied write.
func Load(w pebble.Writer, shard uint64, key, value []byte, expireAt int64) error {
	if expireAt != 0 {
		if err := w.Set(keys.Expiry(shard, expireAt, key), nil, nil); err != nil {
			return err
		}
	}
	return w.Set(keys.User(shard, key), encodeValue(value, expireAt), nil)
}
