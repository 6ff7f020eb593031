// Package kv is the state machine of a user shard: it applies Get, Put,
// Delete and CompareAndSwap operations (alone or as an atomic batch) and keeps
// the client sessions that make every mutation at-most-once.
//
// Apply is deterministic: it reads only the batch it writes into and the
// command itself (including the proposer's timestamp, which moves the
// shard's session clock by a bounded step: see MaxClockStep), never a clock
// or the node's health, so every replica computes the same state from the
// same log.
//
// Reads that bypass Raft (ReadIndex and stale reads) use Get and Scan over a
// pebble.Reader.
package kv
