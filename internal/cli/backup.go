package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/client"
	"github.com/concord-kv/concord/internal/backupfile"
)

// backupAttempts bounds how often one shard is read again after its stream
// failed (a leadership change, a node restarting).
const backupAttempts = 5

func newBackupCmd() *cobra.Command {
	var f clientFlags
	var force bool
	cmd := &cobra.Command{
		Use:   "backup FILE",
		Short: "Write a backup of every key of a running cluster to FILE",
		Long: "Write every live key of the cluster, with its value and expiry, to FILE. Each shard is read at one\n" +
			"linearizable point on its leader: every write acknowledged before the backup started is in it.\n" +
			"Shards are read one after another, so the file is consistent per shard, not across shards.\n" +
			"Restore it with `concord restore FILE --data-dir DIR`. FILE appears only once complete, readable by\n" +
			"its owner only (mode 0600): it holds every key. An existing FILE is refused unless --force is given;\n" +
			"then it is replaced only once the new backup is complete (a failed backup leaves it as it was).",
		Args: argCount(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkBackupPath(args[0], force); err != nil {
				return err
			}
			c, ctx, done, err := f.connect()
			if err != nil {
				return err
			}
			defer done()
			// Ctrl-C or SIGTERM ends the backup through ctx, so that
			// writeBackup removes its partial file (the shards read so far)
			// rather than the signal killing the process where it stands.
			ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
			defer stop()
			// After the first signal, a second one kills the process as
			// usual (the clean-up may be what hangs).
			context.AfterFunc(ctx, stop)
			sum, err := writeBackup(ctx, c, args[0], cmd.ErrOrStderr())
			if err != nil && ctx.Err() == context.Canceled {
				return fmt.Errorf("interrupted: no backup written to %s, its partial file removed (%w)", args[0], err)
			}
			if err != nil {
				return err
			}
			if f.output == "json" {
				return printJSON(cmd.OutOrStdout(), map[string]any{"file": args[0], "keys": sum.Records, "shards": len(sum.Shards),
					"cluster_id": fmt.Sprintf("%x", sum.ClusterID)})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "backup %s: %s from %s of cluster %x\n", args[0], counted(int(sum.Records), "key"), counted(len(sum.Shards), "shard"), sum.ClusterID)
			return nil
		},
	}
	addClientFlags(cmd, &f)
	cmd.Flags().BoolVar(&force, "force", false, "replace FILE if it exists (once the new backup is complete)")
	// A backup takes as long as the data takes to stream, not a request's
	// few seconds.
	t := cmd.Flags().Lookup("timeout")
	t.DefValue = "1h"
	_ = t.Value.Set(t.DefValue)
	return cmd
}

// checkBackupPath refuses, before a byte is read from the cluster, a FILE
// the finished backup can never be renamed to: an empty name or an
// existing directory read every shard and then failed with "rename
// FILE.partial-N FILE: file exists". An existing file is refused without
// force: the rename at the end replaced it without a word, and it may be
// the only good backup there is.
func checkBackupPath(path string, force bool) error {
	if path == "" {
		return errors.New("backup FILE is empty: name the file to write")
	}
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return fmt.Errorf("backup %s: it is a directory; name a file (e.g. %s)", path, filepath.Join(path, "concord.backup"))
	} else if err == nil && !force {
		return fmt.Errorf("backup %s: the file exists; name another, or give --force to replace it", path)
	}
	return nil
}

// writeBackup reads every user shard of the cluster c talks to into a new
// backup file at path, one shard at a time.
func writeBackup(ctx context.Context, c *client.Client, path string, log io.Writer) (backupfile.Summary, error) {
	rt, err := c.RoutingTable(ctx)
	if err != nil {
		return backupfile.Summary{}, err
	}
	if len(rt.GetShards()) == 0 {
		return backupfile.Summary{}, errors.New("the cluster reports no shards yet")
	}
	w, err := backupfile.Create(path, backupfile.Header{ClusterID: rt.GetClusterId(), Created: time.Now()})
	if err != nil {
		return backupfile.Summary{}, err
	}
	for _, route := range rt.GetShards() {
		if err := backupShard(ctx, c, w, route.GetShard().GetShardId(), log); err != nil {
			w.Discard()
			return backupfile.Summary{}, err
		}
	}
	return w.Close()
}

// backupShard writes one shard's section, reading the shard again from the
// start (its partial section dropped) when a stream fails.
func backupShard(ctx context.Context, c *client.Client, w *backupfile.Writer, shard uint64, log io.Writer) error {
	var err error
	for attempt := range backupAttempts {
		if attempt > 0 {
			fmt.Fprintf(log, "shard %d: %s; reading it again\n", shard, errorText(err))
			select {
			case <-ctx.Done():
				// Both wrapped: errors.Is finds the deadline, and the JSON
				// error's code is the last stream's (errorCode).
				return fmt.Errorf("shard %d: %w (last error: %w)", shard, ctx.Err(), err)
			case <-time.After(time.Duration(attempt) * 500 * time.Millisecond):
			}
		}
		err = c.BackupShard(ctx, shard, func(ch *concordpb.BackupShardChunk) error { return addChunk(w, ch) })
		if err == nil {
			return nil
		}
		if aerr := w.AbortShard(); aerr != nil {
			return aerr
		}
		if ctx.Err() != nil {
			break
		}
	}
	return fmt.Errorf("shard %d: %w", shard, err)
}

// addChunk writes one chunk of a shard's stream into its section.
func addChunk(w *backupfile.Writer, ch *concordpb.BackupShardChunk) error {
	if in := ch.GetInfo(); in != nil {
		if err := w.BeginShard(backupfile.Shard{ID: in.GetShardId(), StartHash: in.GetStartHash(),
			EndHash: in.GetEndHash(), AppliedIndex: in.GetAppliedIndex()}); err != nil {
			return err
		}
	}
	for _, r := range ch.GetRecords() {
		if err := w.Add(backupfile.Record{Key: r.GetKey(), Value: r.GetValue(), ExpireAtMs: r.GetExpireAtUnixMs()}); err != nil {
			return err
		}
	}
	if ch.GetDone() {
		return w.EndShard()
	}
	return nil
}

func newRestoreCmd() *cobra.Command {
	var dataDir string
	cmd := &cobra.Command{
		Use:   "restore FILE --data-dir DIR",
		Short: "Prepare a new node's data dir from a backup file",
		Long: "Verify the backup FILE completely (its checksum and counts), then stage it in DIR, which must be\n" +
			"empty or absent. Nothing is written if the file is corrupt or truncated. Then start a new\n" +
			"single-node cluster on DIR:\n\n" +
			"  concord server --addr HOST:PORT --data-dir DIR --peers HOST:PORT\n\n" +
			"Its first start loads the keys, at any address and with any --shards, and serves them.\n" +
			"Add more nodes with --join once it serves.",
		Args: argCount(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if dataDir == "" {
				return errors.New("--data-dir is required: the new node's data dir")
			}
			sum, err := backupfile.Stage(args[0], dataDir)
			if err != nil {
				return fmt.Errorf("restore refused, nothing written: %w", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "verified %s of %s (backup of cluster %x taken %s); staged in %s\n"+
				"start it: concord server --addr HOST:PORT --data-dir %s --peers HOST:PORT\n",
				counted(int(sum.Records), "key"), counted(len(sum.Shards), "shard"), sum.ClusterID, sum.Created.UTC().Format(time.RFC3339), dataDir, dataDir)
			return nil
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", "", "the new node's data dir (must be empty or absent)")
	return cmd
}
