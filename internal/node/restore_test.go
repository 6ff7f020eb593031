package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/backupfile"
	"github.com/concord-kv/concord/internal/grpcapi"
	"github.com/concord-kv/concord/internal/kv"
	"github.com/concord-kv/concord/internal/storage"
)

// stageBackup writes a backup of n keys (k000.. = v000..; every tenth one
// already expired) and stages it in a new data dir, which it returns.
func stageBackup(t *testing.T, n int) string {
	t.Helper()
	return stageRecords(t, n, nil)
}

// stageRecords is stageBackup with extra records after the n keys.
func stageRecords(t *testing.T, n int, extra []backupfile.Record) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "b.bak")
	w, err := backupfile.Create(path, backupfile.Header{ClusterID: 9, Created: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.BeginShard(backupfile.Shard{ID: 1, EndHash: ^uint64(0), AppliedIndex: 10}); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		r := backupfile.Record{Key: fmt.Appendf(nil, "k%03d", i), Value: fmt.Appendf(nil, "v%03d", i)}
		if i%10 == 0 {
			r.ExpireAtMs = time.Now().Add(-time.Minute).UnixMilli()
		}
		if err := w.Add(r); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range extra {
		if err := w.Add(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.EndShard(); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Close(); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "data")
	if _, err := backupfile.Stage(path, dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestRestoreReloadsAfterACrashedLoad protects the restore's atomicity: a
// load that crashed before its final batch (keys written, no identity)
// is redone from the start on the next start, its leftovers cleared; the
// loaded node serves exactly the backup's live keys, routed to its own
// shards, and the staged file is gone.
func TestRestoreReloadsAfterACrashedLoad(t *testing.T) {
	dir := stageBackup(t, 50)
	// What a crashed load may leave: keys in the user shards, no identity.
	eng, err := storage.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	b := eng.NewBatch()
	for shard := uint64(1); shard <= 2; shard++ {
		if err := kv.Load(b, shard, []byte("stray"), []byte("x"), 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := storage.Commit(b, true); err != nil {
		t.Fatal(err)
	}
	b.Close()
	if err := eng.Close(); err != nil {
		t.Fatal(err)
	}

	n := startSolo(t, func(c *Config) { c.DataDir, c.Shards = dir, 2 })
	kvs := grpcapi.NewKV(n.backend(), grpcapi.Limits{MaxKeyBytes: 4096, MaxValueBytes: 1 << 20})
	get := func(key string) *concordpb.GetResponse {
		t.Helper()
		resp, err := kvs.Get(context.Background(), &concordpb.GetRequest{Key: []byte(key)})
		if err != nil {
			t.Fatalf("get %s: %v", key, err)
		}
		return resp
	}
	for i := range 50 {
		k, want := fmt.Sprintf("k%03d", i), fmt.Sprintf("v%03d", i)
		resp := get(k)
		switch {
		case i%10 == 0 && resp.GetFound():
			t.Fatalf("%s had expired before the restore but was loaded", k)
		case i%10 != 0 && (!resp.GetFound() || string(resp.GetValue()) != want):
			t.Fatalf("%s = %q (found %v), want %q", k, resp.GetValue(), resp.GetFound(), want)
		}
	}
	if get("stray").GetFound() {
		t.Fatal("a key left by the crashed load survived the reload")
	}
	if _, err := os.Stat(filepath.Join(dir, backupfile.PendingName)); !os.IsNotExist(err) {
		t.Fatalf("staged file still there after the load: %v", err)
	}
}

// TestRestoreRefusesACorruptStagedFile: a staged file damaged after
// `concord restore` verified it stops the start with a clear error, and the
// node gets no identity (nothing was bootstrapped).
func TestRestoreRefusesACorruptStagedFile(t *testing.T) {
	dir := stageBackup(t, 20)
	p := filepath.Join(dir, backupfile.PendingName)
	raw, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	raw[len(raw)/2] ^= 1
	if err := os.WriteFile(p, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	wantRefusedLoad(t, dir, func(*Config) {}, "corrupt")
}

// TestRestoreRefusesRecordsOverTheLimits: a staged backup holding a key
// this node could never serve (empty, or over --max-key-bytes) or a value
// over --max-value-bytes (a hostile file, or one taken from a cluster run
// with larger limits) stops the start with an error naming the limit, and
// nothing is bootstrapped. Before, such records were loaded as they were.
func TestRestoreRefusesRecordsOverTheLimits(t *testing.T) {
	for _, tc := range []struct {
		rec  backupfile.Record
		mod  func(*Config)
		want string
	}{
		{backupfile.Record{Key: nil, Value: []byte("v")}, func(*Config) {}, "empty key"},
		{backupfile.Record{Key: []byte("k-of-17-bytes-xyz"), Value: []byte("v")}, func(c *Config) { c.MaxKeyBytes = 16 }, "--max-key-bytes"},
		{backupfile.Record{Key: []byte("big"), Value: make([]byte, 100)}, func(c *Config) { c.MaxValueBytes = 99 }, "--max-value-bytes"},
	} {
		dir := stageRecords(t, 5, []backupfile.Record{tc.rec})
		wantRefusedLoad(t, dir, tc.mod, tc.want)
	}
}

// wantRefusedLoad starts a node on dir, which holds a staged backup, and
// checks that the start fails with an error containing want and that the
// node got no identity.
func wantRefusedLoad(t *testing.T, dir string, mod func(*Config), want string) {
	t.Helper()
	cfg := testConfig()
	cfg.Addr, cfg.DataDir = "127.0.0.1:0", dir
	cfg.Peers = []string{cfg.Addr}
	cfg.Logger = slog.New(slog.DiscardHandler)
	mod(&cfg)
	n, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = n.Start(ctx)
	if err == nil {
		n.Stop()
	}
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("start with a bad staged backup: %v, want an error containing %q", err, want)
	}
	eng, err := storage.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	if _, found, err := eng.Ident(); err != nil || found {
		t.Errorf("identity written despite the refused load: found %v, %v", found, err)
	}
}

// crashLoadEnv names, in the environment of TestRestoreCrashedLoadChild,
// the staged data dir whose load it must crash.
const crashLoadEnv = "CONCORD_TEST_CRASH_RESTORE_LOAD"

// TestRestoreCrashedLoadChild is no test of its own: run by
// TestRestoreRefusesAPartialLoadWithoutItsFile in a process of its own, it
// starts a node on a staged backup that commits a batch per key, and kills
// its own process (SIGKILL: no deferred code, no clean close) once the
// load has committed a few batches and made them durable: a real crash
// image of a load midway.
func TestRestoreCrashedLoadChild(t *testing.T) {
	dir := os.Getenv(crashLoadEnv)
	if dir == "" {
		t.Skip("run by TestRestoreRefusesAPartialLoadWithoutItsFile")
	}
	cfg := testConfig()
	cfg.Addr, cfg.DataDir, cfg.Shards = "127.0.0.1:0", dir, 2
	cfg.Peers = []string{cfg.Addr}
	cfg.Logger = slog.New(slog.DiscardHandler)
	n, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	flushed := 0
	n.testHooks.restoreBatchBytes = 1
	n.testHooks.restoreFlushed = func() {
		if flushed++; flushed == 5 {
			// The batches are committed without sync, so the WAL may
			// still hold them in memory; a synced write (the load's own
			// record again) puts them on disk, as time would have: the
			// crash image then holds part of the backup for certain.
			if err := n.eng.MarkRestoring(); err != nil {
				panic(err)
			}
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // the signal ends the process
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	t.Fatalf("the load was not crashed: start returned %v", n.Start(ctx))
}

// TestRestoreRefusesAPartialLoadWithoutItsFile protects against serving a
// partial restore: a load crashed midway (a process killed after some of
// the backup's keys were committed), and the operator then deleted the
// staged file. The next start must refuse, saying what happened and what
// to do, rather than bootstrap a cluster that serves part of the backup as
// all of it; it writes no identity. With the file staged again, the start
// loads the whole backup.
func TestRestoreRefusesAPartialLoadWithoutItsFile(t *testing.T) {
	dir := stageBackup(t, 50)
	staged, err := os.ReadFile(filepath.Join(dir, backupfile.PendingName))
	if err != nil {
		t.Fatal(err)
	}
	child := exec.Command(os.Args[0], "-test.run=^TestRestoreCrashedLoadChild$", "-test.count=1")
	child.Env = append(os.Environ(), crashLoadEnv+"="+dir)
	out, err := child.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ProcessState.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the loading process was not killed midway: %v\n%s", err, out)
	}
	if keys := userKeys(t, dir); keys == 0 {
		t.Fatal("the crash image holds none of the backup's keys: the load did not get midway")
	}
	if err := os.Remove(filepath.Join(dir, backupfile.PendingName)); err != nil {
		t.Fatal(err)
	}

	cfg := testConfig()
	cfg.Addr, cfg.DataDir, cfg.Shards = "127.0.0.1:0", dir, 2
	cfg.Peers = []string{cfg.Addr}
	cfg.Logger = slog.New(slog.DiscardHandler)
	n, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = n.Start(ctx)
	if err == nil {
		n.Stop()
		t.Fatal("a node started on a partly loaded backup whose staged file is gone")
	}
	for _, want := range []string{"holds part of a backup", "did not complete", "concord restore FILE --data-dir " + dir} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("refusal %q does not say %q", err, want)
		}
	}
	eng, err := storage.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, found, err := eng.Ident(); err != nil || found {
		t.Fatalf("identity written despite the refusal: found %v, %v", found, err)
	}
	if err := eng.Close(); err != nil {
		t.Fatal(err)
	}

	// The file staged again, the load starts over and completes.
	if err := os.WriteFile(filepath.Join(dir, backupfile.PendingName), staged, 0o644); err != nil {
		t.Fatal(err)
	}
	m := startSolo(t, func(c *Config) { c.DataDir, c.Shards = dir, 2 })
	kvs := grpcapi.NewKV(m.backend(), grpcapi.Limits{MaxKeyBytes: 4096, MaxValueBytes: 1 << 20})
	for i := 1; i < 50; i += 10 {
		k := fmt.Sprintf("k%03d", i)
		resp, err := kvs.Get(context.Background(), &concordpb.GetRequest{Key: []byte(k)})
		if err != nil || string(resp.GetValue()) != fmt.Sprintf("v%03d", i) {
			t.Fatalf("get %s after the reload: %q, %v", k, resp.GetValue(), err)
		}
	}
	if partial, err := m.eng.Restoring(); err != nil || partial {
		t.Fatalf("the completed load left its record of a load under way: %v, %v", partial, err)
	}
}

// userKeys counts the user keys in the data dir's two user shards.
func userKeys(t *testing.T, dir string) int {
	t.Helper()
	eng, err := storage.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	n := 0
	for shard := uint64(1); shard <= 2; shard++ {
		err := eng.Read(func(r storage.Reader) error {
			recs, _, err := kv.Scan(r, shard, nil, nil, kv.Page{Limit: 1000}, 0)
			n += len(recs)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return n
}

// TestBackupFormatHoldsWhatANodeStores keeps the backup format's limits in
// step with the node's: the largest key, value and shard count a node can
// be configured to hold must fit in a backup file (whose reader refuses
// anything larger before reading it), and one past each is refused by
// the node's own validation.
func TestBackupFormatHoldsWhatANodeStores(t *testing.T) {
	if MaxKeyBytesCap > backupfile.MaxKeyBytes || grpcapi.DefaultMaxBatchBytes > backupfile.MaxValueBytes {
		t.Fatalf("a node may store keys of %d bytes and values of %d, a backup file holds %d and %d",
			MaxKeyBytesCap, grpcapi.DefaultMaxBatchBytes, backupfile.MaxKeyBytes, backupfile.MaxValueBytes)
	}
	cfg := testConfig()
	cfg.Addr, cfg.Peers = "127.0.0.1:1", []string{"127.0.0.1:1"}
	cfg.Shards, cfg.MaxKeyBytes, cfg.MaxValueBytes = backupfile.MaxShards, MaxKeyBytesCap, grpcapi.DefaultMaxBatchBytes
	if err := cfg.validate(); err != nil {
		t.Fatalf("the largest settings a backup holds: %v", err)
	}
	cfg.Shards = backupfile.MaxShards + 1
	if err := cfg.validate(); err == nil {
		t.Fatalf("--shards %d accepted: a backup of the cluster would be refused", cfg.Shards)
	}
}

// TestRestoreRefusesABackupStagedIntoADataDirInUse: a backup file put in
// the data dir of a node that already has its cluster (copied there as
// restore.pending by hand: `concord restore` refuses a non-empty dir) is
// refused at start with an error saying so, and left where it is; the
// node's data is untouched. Before, the start took it for a backup its own
// bootstrap had loaded (a crash between that bootstrap and removing the
// file leaves the same two things), deleted it, logged that it had been
// loaded, and served the old data.
func TestRestoreRefusesABackupStagedIntoADataDirInUse(t *testing.T) {
	n := startSolo(t)
	kvs := grpcapi.NewKV(n.backend(), grpcapi.Limits{MaxKeyBytes: 4096, MaxValueBytes: 1 << 20})
	if _, err := kvs.Put(context.Background(), &concordpb.PutRequest{Key: []byte("mine"), Value: []byte("old")}); err != nil {
		t.Fatal(err)
	}
	cfg := n.cfg
	n.Stop()
	staged, err := os.ReadFile(filepath.Join(stageBackup(t, 5), backupfile.PendingName))
	if err != nil {
		t.Fatal(err)
	}
	pending := filepath.Join(cfg.DataDir, backupfile.PendingName)
	if err := os.WriteFile(pending, staged, 0o600); err != nil {
		t.Fatal(err)
	}

	again, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = again.Start(ctx)
	if err == nil {
		again.Stop()
	}
	if err == nil || !strings.Contains(err.Error(), "did not record loading") {
		t.Fatalf("start with a backup staged into a data dir in use: %v, want a refusal saying the node did not record loading it", err)
	}
	if b, err := os.ReadFile(pending); err != nil || string(b) != string(staged) {
		t.Fatalf("the staged file was not left as it was: %v", err)
	}
}

// TestRestoreRemovesItsLoadedFileAfterACrash: a node that committed its
// restore's bootstrap and stopped before removing the staged file (the
// file put back here after a complete load) removes it at its next start
// and serves the restored keys.
func TestRestoreRemovesItsLoadedFileAfterACrash(t *testing.T) {
	dir := stageBackup(t, 20)
	pending := filepath.Join(dir, backupfile.PendingName)
	staged, err := os.ReadFile(pending)
	if err != nil {
		t.Fatal(err)
	}
	n := startSolo(t, func(c *Config) { c.DataDir = dir })
	cfg := n.cfg
	n.Stop()
	if err := os.WriteFile(pending, staged, 0o600); err != nil {
		t.Fatal(err)
	}
	n = startSolo(t, func(c *Config) { c.Addr, c.Peers, c.DataDir = cfg.Addr, cfg.Peers, dir })
	if _, err := os.Stat(pending); !os.IsNotExist(err) {
		t.Fatalf("the loaded backup file is still staged: %v", err)
	}
	kvs := grpcapi.NewKV(n.backend(), grpcapi.Limits{MaxKeyBytes: 4096, MaxValueBytes: 1 << 20})
	resp, err := kvs.Get(context.Background(), &concordpb.GetRequest{Key: []byte("k001")})
	if err != nil || string(resp.GetValue()) != "v001" {
		t.Fatalf("restored key after the restart: %v, %v", resp, err)
	}
}
