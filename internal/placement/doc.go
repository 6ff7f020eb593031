// Package placement is the state machine of the meta shard (shard 0): the
// cluster's nodes with their addresses and states, every shard's descriptor,
// and the allocator of node ids. Like package kv it is deterministic; the
// node runs it through the same replica machinery as any other shard.
//
// Shard descriptors here are the placement service's view, fed by shard
// leaders after each membership change (UpdateDescriptor, newest epoch wins).
// Each shard's own descriptor, kept in its state machine, is the truth for
// that shard's membership.
package placement
