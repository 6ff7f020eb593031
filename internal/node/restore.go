package node

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/backupfile"
	"github.com/concord-kv/concord/internal/keys"
	"github.com/concord-kv/concord/internal/kv"
	"github.com/concord-kv/concord/internal/routing"
	"github.com/concord-kv/concord/internal/storage"
)

// A data dir prepared by `concord restore` holds a verified backup file,
// backupfile.PendingName, next to the (still empty) database. The node's
// first start bootstraps a new single-node cluster and loads the file's
// keys into the kv state of its new user shards (routed by hash, so the
// shard count may differ from the backup's) before it serves.
//
// The load is atomic with the bootstrap: the keys go in batches committed
// without sync, and the last batch, synced, also holds the node's identity.
// A crash before that leaves no identity: the next start clears the shards'
// state spans and loads again. A crash after it finds the identity and
// only removes the file. The keys are written as applied state at the
// bootstrap index, below the truncated log, so any replica added later
// receives them in a raft snapshot, like any other state.
//
// The staged file is not the only evidence of a load under way: before
// the first key, a synced record in the database says a load began
// (storage.MarkRestoring), and the final batch deletes it with the
// identity's write. A start that finds the record and no staged file (an
// operator deleted it after the crash) would bootstrap a cluster serving
// part of the backup as if it were all of it: it refuses instead
// (refusePartialRestore), telling the operator to restore again.

// loadBatchBytes is about how many bytes of keys and values go in one
// batch of a restore's load.
const loadBatchBytes = 16 << 20

// stagedRestore returns the path of the backup staged in the data dir, ""
// if there is none.
func (n *Node) stagedRestore() (string, error) {
	p := filepath.Join(n.cfg.DataDir, backupfile.PendingName)
	switch _, err := os.Stat(p); {
	case err == nil:
		return p, nil
	case errors.Is(err, os.ErrNotExist):
		return "", nil
	default:
		return "", err
	}
}

// refusePartialRestore refuses to start a node that has no identity and
// holds part of a backup whose load did not complete, when the staged
// file (staged, "" if none) is gone: nothing could complete the load, and
// the keys it left would be served as the whole backup. With the file
// there, the start loads again from the beginning instead.
func (n *Node) refusePartialRestore(staged string) error {
	if staged != "" {
		return nil
	}
	partial, err := n.eng.Restoring()
	if err != nil || !partial {
		return err
	}
	return fmt.Errorf("data dir %s holds part of a backup: a load staged by concord restore began and did not complete, "+
		"and its staged file %s is gone, so the node will not serve the partial data; "+
		"restore again: remove %s, run `concord restore FILE --data-dir %s`, and start the node as before",
		n.cfg.DataDir, backupfile.PendingName, n.cfg.DataDir, n.cfg.DataDir)
}

// checkRestoreStart refuses to start a staged restore other than as a new
// single-node cluster: its peers would bootstrap without the data.
func (n *Node) checkRestoreStart(peers []string) error {
	if len(n.cfg.Join) > 0 {
		return fmt.Errorf("data dir %s holds a backup staged by concord restore, which starts a new cluster: "+
			"start it with --peers %s (itself only), not --join", n.cfg.DataDir, n.cfg.Addr)
	}
	if len(peers) != 1 || peers[0] != n.cfg.Addr {
		return fmt.Errorf("data dir %s holds a backup staged by concord restore, which starts a new single-node cluster: "+
			"--peers must be exactly this node's --addr %s; add more nodes with --join once it serves", n.cfg.DataDir, n.cfg.Addr)
	}
	return nil
}

// finishRestore removes a staged backup that this node's committed
// bootstrap loaded (the process stopped before removing it), which it
// knows by the digest the bootstrap recorded. Any other staged file was
// put in a data dir in use by hand: the start is refused, the file and the
// data left as they are, rather than the file deleted as if loaded.
func (n *Node) finishRestore() error {
	p, err := n.stagedRestore()
	if err != nil || p == "" {
		return err
	}
	loaded, err := n.eng.Restored()
	if err != nil {
		return err
	}
	digest, err := backupfile.TrailerDigest(p)
	if loaded == nil || err != nil || !bytes.Equal(digest, loaded) {
		// Without a recorded digest it may also be a backup a binary from
		// before the record loaded, which then stopped before removing it:
		// refusing is safe either way, and the text says both.
		return fmt.Errorf("data dir %s already holds a node of a cluster, and a backup staged in it as %s that this node's bootstrap did not record loading "+
			"(copied there by hand, or loaded by an older binary that stopped before removing it): "+
			"a backup is restored into a new node's data dir (`concord restore FILE --data-dir EMPTY_DIR`, then start a new single-node cluster there), "+
			"never into one in use; move %s out of the data dir to start this node with its own data",
			n.cfg.DataDir, backupfile.PendingName, p)
	}
	if err := os.Remove(p); err != nil {
		n.log.Warn("could not remove the loaded backup file", "file", p, "err", err)
		return nil
	}
	n.log.Info("removed the backup file loaded at bootstrap", "file", p)
	return nil
}

// restoreLoad is one load of a staged backup into the new user shards.
type restoreLoad struct {
	path  string
	table *routing.Table
	now   int64
	// maxKey and maxValue are the node's limits (--max-key-bytes,
	// --max-value-bytes): a record past them is refused, as a write is.
	maxKey, maxValue int
	w                func() storage.Writer // the batch being filled
	flush            func() error          // commits it (no sync) and starts another
	batchBytes       int                   // flush every this many bytes of keys and values
	loaded, expired  uint64
}

// load clears the user shards' state spans (a crashed earlier load may have
// left keys) and writes every record of the file that has not expired.
func (l *restoreLoad) load(shards []*concordpb.ShardDescriptor) (backupfile.Summary, error) {
	for _, d := range shards {
		if d.GetShardId() == uint64(routing.MetaShard) {
			continue
		}
		lo, hi := keys.StateSpan(d.GetShardId())
		if err := l.w().DeleteRange(lo, hi, nil); err != nil {
			return backupfile.Summary{}, err
		}
	}
	size := 0
	return backupfile.Read(l.path, func(_ backupfile.Shard, r backupfile.Record) error {
		if err := l.check(r); err != nil {
			return err
		}
		if r.ExpireAtMs != 0 && r.ExpireAtMs <= l.now {
			l.expired++
			return nil
		}
		d := l.table.Lookup(r.Key)
		if d == nil {
			return fmt.Errorf("no shard owns key %q", r.Key)
		}
		if err := kv.Load(l.w(), d.GetShardId(), r.Key, r.Value, r.ExpireAtMs); err != nil {
			return err
		}
		l.loaded++
		if size += len(r.Key) + len(r.Value); size >= l.batchBytes {
			size = 0
			return l.flush()
		}
		return nil
	})
}

// check refuses a record the node could not have stored: the digest only
// says the file is whole, not that its records are keys this node serves
// (a hostile file, or one from a cluster run with larger limits). One is
// enough to refuse the whole load, which then changes nothing.
func (l *restoreLoad) check(r backupfile.Record) error {
	switch {
	case len(r.Key) == 0:
		return errors.New("the backup holds a record with an empty key, which no Concord node stores")
	case len(r.Key) > l.maxKey:
		return fmt.Errorf("the backup holds a key of %d bytes (%.40q...); this node's limit is %d (--max-key-bytes)", len(r.Key), r.Key, l.maxKey)
	case len(r.Value) > l.maxValue:
		return fmt.Errorf("the backup holds a value of %d bytes (key %.40q); this node's limit is %d (--max-value-bytes)", len(r.Value), r.Key, l.maxValue)
	}
	return nil
}
