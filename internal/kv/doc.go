// Package kv is the state machine of a user shard: it applies Get, Put,
// Delete and CompareAndSwap operations, the read-modify-write operations of
// the Redis protocol (INCR, INCR_FLOAT, APPEND, SET_RANGE, GET_DELETE,
// EXPIRE) and the sweep's DELETE_EXPIRED (alone or as an atomic batch: one
// Raft entry, so each is atomic per key), and keeps the client sessions that
// make every mutation at-most-once: one request at a time, or windowed
// (window.go: many in flight, one record per batch).
//
// Keys may carry an expiry (value.go: an envelope around the stored value,
// plus an index ordered by time for the sweep). The time a key expires is
// decided at apply, from the command's leader-stamped time on the shard's
// clock, so every replica stores the same instant.
//
// Writes may carry versions (version.go), which order available mode's
// tentative writes against every other write: a versioned command's writes
// take a version above every version in the shard, and an op reconciling a
// tentative write (Op.tentative_version) applies only over an older one.
//
// A PUT reads the key only when it needs its state: for a condition,
// keep_ttl, or the previous value it was asked to return (return_prev).
// Otherwise it is a blind write, and with the session sequence numbers and
// the shard clock cached in memory (cache.go) the common put applies
// without a single point read. The session and clock records are written
// once per batch, by Flush after the batch's last command (deferred.go).
//
// Absorb (absorb.go) is for whoever builds a command: it leaves out the
// writes a later blind PUT of the same key in the command overwrites
// unobserved, with the argument for why no one can tell.
//
// Apply is deterministic: it reads only the batch it writes into and the
// command itself (including the proposer's timestamp, which moves the
// shard's clock by a bounded step: see MaxClockStep), never a clock or the
// node's health, so every replica computes the same state from the same log.
//
// Reads that bypass Raft (ReadIndex and stale reads) use Get and Scan over a
// pebble.Reader, with the serving node's time passed in: an expired key is
// absent from the moment it expires, whether or not the sweep has deleted it.
package kv
