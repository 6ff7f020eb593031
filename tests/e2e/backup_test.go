package e2e

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/client"
	"github.com/concord-kv/concord/internal/backupfile"
	"github.com/concord-kv/concord/internal/dial"
	"github.com/concord-kv/concord/internal/localcluster"
	"github.com/concord-kv/concord/internal/testcluster"
)

// TestBackupRestore: `concord backup` of a 3-node cluster taken while
// writes continue holds every key written (and acknowledged) before it
// started, with its expiry, and no key that had expired; `concord restore`
// stages it in a new data dir (refusing a non-empty one), and a single node
// started there, at a new address and with another shard count, serves
// every key of the file and accepts writes; a node that joins it gets the
// keys by raft snapshot. A multi-node start of a restored dir is refused.
func TestBackupRestore(t *testing.T) {
	t.Parallel()
	c := startCluster(t, testcluster.Options{Shards: 4})
	cl := c.Client(t)
	ctx := context.Background()

	// Keys written before the backup: plain, with a long TTL, with a TTL
	// that runs out before the backup.
	want := map[string]string{}
	for i := range 150 {
		k, v := fmt.Sprintf("pre%04d", i), fmt.Sprintf("value-%d", i)
		var opts []client.PutOption
		switch i % 3 {
		case 1:
			opts = append(opts, client.TTL(time.Hour))
		case 2:
			k = fmt.Sprintf("gone%04d", i)
			opts = append(opts, client.TTL(300*time.Millisecond))
		}
		if _, _, err := cl.Put(ctx, []byte(k), []byte(v), opts...); err != nil {
			t.Fatalf("put %s: %v", k, err)
		}
		if i%3 != 2 {
			want[k] = v
		}
	}
	testcluster.WaitFor(t, 10*time.Second, func() error {
		if _, found, err := cl.Get(ctx, []byte("gone0149")); err != nil || found {
			return fmt.Errorf("short-TTL key still readable (found %v, err %v)", found, err)
		}
		return nil
	})

	// Writes continue during the backup.
	bctx, stopBurst := context.WithCancel(ctx)
	defer stopBurst()
	b := startBurst(bctx, cl, seqKeys("live", 100000), func(k string) string { return "v-" + k }, 4, 5*time.Second)
	waitAcked(t, b, 50, 30*time.Second)
	b.mu.Lock()
	ackedBefore := maps.Clone(b.ackedKV)
	b.mu.Unlock()
	file := filepath.Join(t.TempDir(), "cluster.bak")
	if out, err := cli(t, c, "backup", file, "--timeout", "60s"); err != nil || !strings.Contains(out, "keys from 4 shards") {
		t.Fatalf("backup: %v, output %q", err, out)
	}
	stopBurst()
	<-b.done

	got := readBackup(t, file)
	for k, v := range want {
		if r, ok := got[k]; !ok || string(r.Value) != v {
			t.Fatalf("key %s written before the backup: in the file %v, value %q, want %q", k, ok, r.Value, v)
		}
	}
	for k, v := range ackedBefore {
		if r, ok := got[k]; !ok || string(r.Value) != v {
			t.Fatalf("key %s acknowledged before the backup started is missing (present %v, value %q)", k, ok, r.Value)
		}
	}
	for k, r := range got {
		switch {
		case strings.HasPrefix(k, "gone"):
			t.Fatalf("expired key %s is in the backup", k)
		case strings.HasPrefix(k, "pre") && (r.ExpireAtMs != 0) != (want[k] != "" && keyIndex(k)%3 == 1):
			t.Fatalf("key %s has expiry %d in the backup", k, r.ExpireAtMs)
		case strings.HasPrefix(k, "live") && string(r.Value) != "v-"+k:
			t.Fatalf("key %s has value %q in the backup", k, r.Value)
		}
	}
	t.Logf("backup holds %d keys: %d written before, %d of the burst (%d acknowledged before it started)",
		len(got), len(want), len(got)-len(want), len(ackedBefore))
	c.KillAll()

	dir := filepath.Join(t.TempDir(), "restored")
	bin := testcluster.Binary(t)
	if out, err := exec.Command(bin, "restore", file, "--data-dir", dir).CombinedOutput(); err != nil {
		t.Fatalf("restore: %v: %s", err, out)
	}
	if out, err := exec.Command(bin, "restore", file, "--data-dir", dir).CombinedOutput(); err == nil || !strings.Contains(string(out), "not empty") {
		t.Fatalf("a second restore into the same dir: %v: %s", err, out)
	}
	refuseMultiPeerStart(t, bin, file)

	addr := startRestored(t, bin, dir, "--shards", "3")
	rc := newTestClient(t, addr)
	for k, r := range got {
		v, at, found, err := rc.GetWithExpiry(ctx, []byte(k))
		if err != nil || !found || string(v) != string(r.Value) {
			t.Fatalf("restored node: get %s = %q, found %v, err %v; want %q", k, v, found, err, r.Value)
		}
		if r.ExpireAtMs != 0 && at.UnixMilli() != r.ExpireAtMs || r.ExpireAtMs == 0 && !at.IsZero() {
			t.Fatalf("restored node: %s expires at %v, backup says %d", k, at, r.ExpireAtMs)
		}
	}
	if _, _, err := rc.Put(ctx, []byte("after-restore"), []byte("new")); err != nil {
		t.Fatalf("restored node refused a write: %v", err)
	}
	if v, found, err := rc.Get(ctx, []byte("after-restore")); err != nil || !found || string(v) != "new" {
		t.Fatalf("read back the new write: %q %v %v", v, found, err)
	}
	if _, err := os.Stat(filepath.Join(dir, backupfile.PendingName)); !os.IsNotExist(err) {
		t.Fatalf("the staged backup was not removed after loading: %v", err)
	}

	// A node that joins receives the restored keys by raft snapshot: its
	// own replicas serve them (stale reads answered by the joiner itself).
	joiner := startNode(t, bin, filepath.Join(t.TempDir(), "joiner"), "--join", addr)
	conn, err := dial.Dial(joiner)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	kvc := concordpb.NewKVClient(conn)
	stale := &concordpb.RequestHeader{Consistency: concordpb.Consistency_STALE}
	testcluster.WaitFor(t, 2*readyTimeout, func() error {
		for k, r := range got {
			resp, err := kvc.Get(ctx, &concordpb.GetRequest{Header: stale, Key: []byte(k)})
			if err != nil {
				return err
			}
			if resp.GetHeader().GetServedByNodeId() != 2 {
				return fmt.Errorf("%s served by node %d, not by the joiner's own replica yet", k, resp.GetHeader().GetServedByNodeId())
			}
			if !resp.GetFound() || string(resp.GetValue()) != string(r.Value) {
				return fmt.Errorf("joiner's replica: %s = %q, found %v; want %q", k, resp.GetValue(), resp.GetFound(), r.Value)
			}
		}
		return nil
	})
}

func keyIndex(k string) int {
	var i int
	fmt.Sscanf(k[len(k)-4:], "%d", &i)
	return i
}

// readBackup reads a backup file into key → record.
func readBackup(t *testing.T, path string) map[string]backupfile.Record {
	t.Helper()
	got := map[string]backupfile.Record{}
	_, err := backupfile.Read(path, func(_ backupfile.Shard, r backupfile.Record) error {
		if _, dup := got[string(r.Key)]; dup {
			return fmt.Errorf("key %q twice", r.Key)
		}
		got[string(r.Key)] = r
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// refuseMultiPeerStart stages file in a fresh dir and checks that a start
// with another peer is refused with a message saying why.
func refuseMultiPeerStart(t *testing.T, bin, file string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "multi")
	if out, err := exec.Command(bin, "restore", file, "--data-dir", dir).CombinedOutput(); err != nil {
		t.Fatalf("restore: %v: %s", err, out)
	}
	ports, err := localcluster.FreePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	a, other := fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "server", "--addr", a, "--data-dir", dir, "--peers", a+","+other).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "single-node cluster") {
		t.Fatalf("a restored dir started with two peers: %v: %s", err, out)
	}
}

// startRestored starts a node on dir as a new single-node cluster at a new
// address and returns the address.
func startRestored(t *testing.T, bin, dir string, extra ...string) string {
	t.Helper()
	return startNode(t, bin, dir, append([]string{"--peers", ""}, extra...)...)
}

// startNode starts `concord server` on dir at a new address with args
// (a "--peers" followed by "" means the node's own address) and returns
// the address; the node is killed when the test ends. The space guard is
// off (--reserve-disk-bytes=0, before args, which may set it), as in
// testcluster: the default reserve would refuse writes on a host with
// little free disk.
func startNode(t *testing.T, bin, dir string, args ...string) string {
	t.Helper()
	port, err := localcluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	for i := range args {
		if args[i] == "" && i > 0 && args[i-1] == "--peers" {
			args[i] = addr
		}
	}
	logf, err := os.Create(filepath.Join(t.TempDir(), "node.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, append([]string{"server", "--addr", addr, "--data-dir", dir, "--reserve-disk-bytes=0"}, args...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("log of the node at %s:\n%s", addr, b)
		}
		logf.Close()
	})
	return addr
}

// newTestClient connects to addr, waiting for the node to serve.
func newTestClient(t *testing.T, addr string) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	cl, err := client.New(ctx, addr)
	if err != nil {
		t.Fatalf("connect to the restored node: %v", err)
	}
	t.Cleanup(func() { cl.Close() })
	testcluster.WaitFor(t, readyTimeout, func() error {
		_, _, err := cl.Get(ctx, []byte("probe"))
		return err
	})
	return cl
}

// TestBackupInterruptedLeavesNothing: `concord backup` interrupted (Ctrl-C,
// SIGTERM) while it reads a shard removes its partial file
// (FILE.partial-RANDOM), which holds the shards read so far, and exits with
// an error; neither FILE nor a partial file is left. Before, the signal
// killed the process where it stood, leaving the partial file behind. Two of the three nodes are paused so
// that the shards they lead cannot be read: the backup stays under way
// until it is interrupted.
func TestBackupInterruptedLeavesNothing(t *testing.T) {
	t.Parallel()
	c := startCluster(t, testcluster.Options{Shards: 3})
	cl := c.Client(t)
	for i := range 30 {
		if _, _, err := cl.Put(context.Background(), fmt.Appendf(nil, "k%02d", i), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	c.Pause(1)
	c.Pause(2)
	defer c.Resume(2)
	defer c.Resume(1)

	file := filepath.Join(t.TempDir(), "cluster.bak")
	var stderr strings.Builder
	cmd := exec.Command(testcluster.Binary(t), "backup", file, "--endpoints", c.Addr(0), "--timeout", "2m")
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	testcluster.WaitFor(t, 30*time.Second, func() error {
		select {
		case err := <-exited:
			t.Fatalf("the backup ended before it was interrupted: %v: %s", err, stderr.String())
		default:
		}
		if partial, err := filepath.Glob(file + ".partial*"); err != nil || len(partial) == 0 {
			return fmt.Errorf("no partial file yet (%v)", err)
		}
		return nil
	})
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err == nil {
			t.Fatalf("an interrupted backup exited 0: %s", stderr.String())
		}
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("the backup did not end within 30 s of its interrupt: %s", stderr.String())
	}
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Fatalf("an interrupted backup left %s (%v); stderr: %s", file, err, stderr.String())
	}
	if partial, err := filepath.Glob(file + ".partial*"); err != nil || len(partial) != 0 {
		t.Fatalf("an interrupted backup left %v (%v); stderr: %s", partial, err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "interrupted") {
		t.Fatalf("the interrupted backup's error does not say so: %s", stderr.String())
	}
	t.Logf("the interrupted backup said: %s", stderr.String())
}

// TestBackupCompletesAcrossALostLeader: the leader of a shard stops
// answering (SIGSTOP) just before `concord backup` runs; the backup still
// completes once the other nodes elect a new leader (a stream to the
// silent node fails by keepalive and the shard is read again through
// another node), and holds every key written exactly once.
func TestBackupCompletesAcrossALostLeader(t *testing.T) {
	t.Parallel()
	c := startCluster(t, testcluster.Options{Shards: 3})
	cl := c.Client(t)
	want := map[string]string{}
	for i := range 300 {
		k, v := fmt.Sprintf("k%03d", i), fmt.Sprintf("v%d", i)
		if _, _, err := cl.Put(context.Background(), []byte(k), []byte(v)); err != nil {
			t.Fatal(err)
		}
		want[k] = v
	}
	leader := c.LeaderOf(t, 1, 10*time.Second)
	c.Pause(leader)
	defer c.Resume(leader)
	var others []string
	for i := range c.N() {
		if i != leader {
			others = append(others, c.Addr(i))
		}
	}
	file := filepath.Join(t.TempDir(), "cluster.bak")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := runConcord(ctx, t, "backup", file, "--endpoints", strings.Join(others, ","), "--timeout", "90s")
	if err != nil {
		t.Fatalf("backup with shard 1's leader silent: %v (%s)", err, out)
	}
	got := readBackup(t, file) // fails on a key twice
	if len(got) != len(want) {
		t.Fatalf("the backup holds %d keys, want %d", len(got), len(want))
	}
	for k, v := range want {
		if string(got[k].Value) != v {
			t.Fatalf("key %s: %q in the backup, want %q", k, got[k].Value, v)
		}
	}
}

// TestBackupRestoreAtTheLimits: keys and values at the largest limits a
// node accepts (--max-key-bytes 64 KiB, --max-value-bytes 8 MiB: values
// as large as a write can carry) go
// through a backup (streamed in chunks, relayed by a node that does not
// lead every shard) and a restore onto a node with the same limits, byte
// for byte.
func TestBackupRestoreAtTheLimits(t *testing.T) {
	t.Parallel()
	limits := []string{"--max-key-bytes=65536", "--max-value-bytes=8388608"}
	c := startCluster(t, testcluster.Options{Shards: 2, ExtraArgs: limits})
	cl := c.Client(t)
	ctx := context.Background()
	want := map[string][]byte{}
	for i := range 3 {
		k := fmt.Sprintf("big-value-%d", i)
		// A write carries at most 8 MiB of keys and values in all, so
		// the largest value one can write is that less its key.
		want[k] = bytes.Repeat([]byte{byte('a' + i)}, 8<<20-len(k))
	}
	want[strings.Repeat("K", 64<<10)] = []byte("long key")
	for k, v := range want {
		if _, _, err := cl.Put(ctx, []byte(k), v); err != nil {
			t.Fatalf("put %.20s (%d-byte key, %d-byte value): %v", k, len(k), len(v), err)
		}
	}
	file := filepath.Join(t.TempDir(), "big.bak")
	bctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if out, err := runConcord(bctx, t, "backup", file, "--endpoints", c.Addr(0)); err != nil {
		t.Fatalf("backup: %v (%s)", err, out)
	}
	got := readBackup(t, file)
	if len(got) != len(want) {
		t.Fatalf("the backup holds %d keys, want %d", len(got), len(want))
	}
	for k, v := range want {
		if !bytes.Equal(got[k].Value, v) {
			t.Fatalf("key %.20s: %d bytes in the backup, want %d", k, len(got[k].Value), len(v))
		}
	}
	c.KillAll()

	dir := filepath.Join(t.TempDir(), "restored")
	bin := testcluster.Binary(t)
	if out, err := exec.Command(bin, "restore", file, "--data-dir", dir).CombinedOutput(); err != nil {
		t.Fatalf("restore: %v: %s", err, out)
	}
	rc := newTestClient(t, startRestored(t, bin, dir, limits...))
	for k, v := range want {
		got, found, err := rc.Get(ctx, []byte(k))
		if err != nil || !found || !bytes.Equal(got, v) {
			t.Fatalf("restored node: %.20s: %d bytes, found %v, %v; want %d bytes", k, len(got), found, err, len(v))
		}
	}
}
