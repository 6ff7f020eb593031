package storage

import (
	"github.com/cockroachdb/pebble/v2"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/internal/ids"
)

// Reader and Writer are Pebble's read and write interfaces under storage's
// name, so that code outside storage and the state machines can pass them
// along without importing Pebble (internal/lint).
type (
	Reader = pebble.Reader
	Writer = pebble.Writer
)

// NewBatch returns a write-only batch; Commit commits it.
func (e *Engine) NewBatch() *pebble.Batch { return e.db.NewBatch() }

// NewIndexedBatch returns a batch whose reads see its own writes, as state
// machines need: a command reads what earlier commands in the batch wrote.
func (e *Engine) NewIndexedBatch() *pebble.Batch { return e.db.NewIndexedBatch() }

// Commit commits b; with sync set it is durable when Commit returns.
func Commit(b *pebble.Batch, sync bool) error {
	if sync {
		return b.Commit(pebble.Sync)
	}
	return b.Commit(pebble.NoSync)
}

// GetProto reads key into m from the engine's committed state; it reports
// false if the key is absent.
func (e *Engine) GetProto(key []byte, m proto.Message) (bool, error) { return GetProto(e.db, key, m) }

// LoadRaftLog loads the raft log of shard's replica on this engine.
func (e *Engine) LoadRaftLog(shard ids.ShardID) (*RaftLog, error) { return LoadRaftLog(e.db, shard) }
