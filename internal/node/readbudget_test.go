package node

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/grpcapi"
)

// budgetNode starts a solo node with a Redis port and writes one 1 MiB
// value under "big", returning the node and its KV service.
func budgetNode(t *testing.T) (*Node, *grpcapi.KV) {
	t.Helper()
	n := startSolo(t, func(c *Config) { c.RedisAddr = "127.0.0.1:0" })
	kv := grpcapi.NewKV(n.backend(), grpcapi.Limits{MaxKeyBytes: 4096, MaxValueBytes: 1 << 20})
	big := bytes.Repeat([]byte("v"), 1<<20)
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := kv.Put(context.Background(), &concordpb.PutRequest{Key: []byte("big"), Value: big})
		if err == nil {
			return n, kv
		}
		if time.Now().After(deadline) {
			t.Fatalf("put never succeeded: %v", err)
		}
		time.Sleep(10 * time.Millisecond) // polls until the shard has elected its leader
	}
}

// redisDial connects to the node's Redis port.
func redisDial(t *testing.T, n *Node) (net.Conn, *bufio.Reader) {
	t.Helper()
	nc, err := net.Dial("tcp", n.RedisAddr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(30 * time.Second))
	return nc, bufio.NewReader(nc)
}

// command is one RESP command.
func command(args ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	return b.String()
}

// TestBatchOfGetsOverTheReadBudgetRefused protects the read budget of a
// batch of GETs: 100 GETs of a 1 MiB value (100 MiB, past the 64 MiB
// bound) are refused ResourceExhausted, "reply too large", at the value
// that passes it (before: the node gathered them all and the answer was
// too large to send anyway), and a batch within it is still served.
func TestBatchOfGetsOverTheReadBudgetRefused(t *testing.T) {
	_, kv := budgetNode(t)
	get := func(n int) error {
		ops := make([]*concordpb.Op, n)
		for i := range ops {
			ops[i] = &concordpb.Op{Type: concordpb.OpType_OP_GET, Key: []byte("big")}
		}
		_, err := kv.Batch(context.Background(), &concordpb.BatchRequest{Ops: ops})
		return err
	}
	err := get(100)
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "reply too large") {
		t.Fatalf("100 GETs of 1 MiB: %v, want ResourceExhausted, reply too large", err)
	}
	if err := get(10); err != nil {
		t.Fatalf("10 GETs of 1 MiB: %v", err)
	}
}

// TestRedisMGetOverTheOutputLimitRefused protects MGET's budget on the
// Redis port: MGET of a 1 MiB key 300 times (a 2 KB command, a 300 MiB
// reply) answers "ERR reply too large" and leaves the connection usable
// (before: the node built the whole reply, then closed the connection at
// the output buffer limit).
func TestRedisMGetOverTheOutputLimitRefused(t *testing.T) {
	n, _ := budgetNode(t)
	nc, r := redisDial(t, n)
	args := []string{"MGET"}
	for range 300 {
		args = append(args, "big")
	}
	if _, err := io.WriteString(nc, command(args...)+command("PING")); err != nil {
		t.Fatal(err)
	}
	line, err := r.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "-ERR reply too large") {
		t.Fatalf("MGET of 300 MiB answered %q, %v; want -ERR reply too large", line, err)
	}
	if line, err := r.ReadString('\n'); err != nil || line != "+PONG\r\n" {
		t.Fatalf("PING after the refused MGET answered %q, %v", line, err)
	}
}

// TestRedisPipelineOverTheOutputLimitBoundedAsRead protects the output
// buffer limit of a pipeline: 300 pipelined GETs of a 1 MiB value (300
// MiB of replies, past the 64 MiB limit) close the connection once their
// reads pass the limit, without the node building the replies first
// (before: ~300 MiB allocated, then the connection closed).
func TestRedisPipelineOverTheOutputLimitBoundedAsRead(t *testing.T) {
	n, _ := budgetNode(t)
	nc, r := redisDial(t, n)
	pipeline := strings.Repeat(command("GET", "big"), 300)
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	if _, err := io.WriteString(nc, pipeline); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(r)
	runtime.ReadMemStats(&m1)
	if err != nil || len(got) != 0 {
		t.Fatalf("a pipeline past the output limit was answered %d bytes, %v; want the connection closed", len(got), err)
	}
	if alloc := m1.TotalAlloc - m0.TotalAlloc; alloc > 200<<20 {
		t.Fatalf("the pipeline allocated %d MiB; its reads should stop near the 64 MiB limit", alloc>>20)
	}
}

// putBig writes n keys "big/NN" of 1 MiB values.
func putBig(t *testing.T, kv *grpcapi.KV, n int) {
	t.Helper()
	big := bytes.Repeat([]byte("v"), 1<<20)
	for i := range n {
		if _, err := kv.Put(context.Background(), &concordpb.PutRequest{Key: fmt.Appendf(nil, "big/%03d", i), Value: big}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestScanPageBoundedByBytes protects the byte bound of a scan page: 80
// pairs of 1 MiB values (80 MiB) do not come back as one page of 1,000
// keys (before: the page held all 80 MiB), but as pages of about 64 MiB
// at most whose continuation (more, next_start) reaches every key once,
// in order; a keys-only scan carries no values.
func TestScanPageBoundedByBytes(t *testing.T) {
	_, kv := budgetNode(t)
	putBig(t, kv, 80)
	var keys []string
	start := []byte("big/")
	for pages := 0; ; pages++ {
		if pages > 10 {
			t.Fatal("the scan did not end")
		}
		resp, err := kv.Scan(context.Background(), &concordpb.ScanRequest{Start: start, End: []byte("big0"), Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		size := 0
		for _, p := range resp.GetKvs() {
			size += len(p.GetKey()) + len(p.GetValue())
			keys = append(keys, string(p.GetKey()))
		}
		if size > 65<<20 {
			t.Fatalf("a page held %d MiB, past its 64 MiB bound", size>>20)
		}
		if !resp.GetMore() {
			break
		}
		start = resp.GetNextStart()
	}
	if len(keys) != 80 {
		t.Fatalf("the scan returned %d keys, want 80", len(keys))
	}
	for i, k := range keys {
		if k != fmt.Sprintf("big/%03d", i) {
			t.Fatalf("key %d is %q, want big/%03d", i, k, i)
		}
	}
	resp, err := kv.Scan(context.Background(), &concordpb.ScanRequest{Start: []byte("big/"), End: []byte("big0"), KeysOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetKvs()) != 80 || resp.GetMore() {
		t.Fatalf("keys-only scan: %d keys, more %v; want all 80 in one page", len(resp.GetKvs()), resp.GetMore())
	}
	for _, p := range resp.GetKvs() {
		if len(p.GetValue()) != 0 {
			t.Fatalf("keys-only scan returned a %d-byte value for %q", len(p.GetValue()), p.GetKey())
		}
	}
}

// TestRedisKeyspaceWalksReadNoValues protects the Redis keyspace commands'
// keys-only scans: SCAN (through its cursors), KEYS and DBSIZE over 80
// keys of 1 MiB values see every key, and allocate far less than the
// values (before: each walk read and copied all 80 MiB).
func TestRedisKeyspaceWalksReadNoValues(t *testing.T) {
	n, kv := budgetNode(t)
	putBig(t, kv, 80)
	nc, r := redisDial(t, n)
	// TotalAlloc counts the whole process, whose flushes and compactions of
	// the 80 MiB just written may run during a walk; a walk that reads the
	// values allocates at least 3 x 80 MiB every time, so the least of a
	// few walks, against half of that, tells them apart (under make
	// test's load a flush ran through all of three walks: 62 MiB each).
	least := uint64(1 << 62)
	for range 5 {
		if alloc := walkKeyspace(t, nc, r); alloc < least {
			least = alloc
		}
		if least <= 120<<20 {
			return
		}
	}
	t.Fatalf("DBSIZE, KEYS and SCAN allocated at least %d MiB in each of 5 walks; a keys-only walk reads no values", least>>20)
}

// walkKeyspace runs DBSIZE, KEYS and a whole SCAN of the 80 big keys, and
// returns the bytes the process allocated meanwhile.
func walkKeyspace(t *testing.T, nc net.Conn, r *bufio.Reader) uint64 {
	t.Helper()
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	if _, err := io.WriteString(nc, command("DBSIZE")+command("KEYS", "big/*")); err != nil {
		t.Fatal(err)
	}
	if line, err := r.ReadString('\n'); err != nil || line != ":81\r\n" { // and "big"
		t.Fatalf("DBSIZE answered %q, %v; want :81", line, err)
	}
	if line, err := r.ReadString('\n'); err != nil || line != "*80\r\n" {
		t.Fatalf("KEYS big/* answered %q, %v; want 80 keys", line, err)
	}
	for range 80 * 2 {
		if _, err := r.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
	}
	seen := 0
	for cursor := "0"; ; {
		if _, err := io.WriteString(nc, command("SCAN", cursor, "MATCH", "big/*", "COUNT", "1000")); err != nil {
			t.Fatal(err)
		}
		var keys int
		cursor, keys = readScanReply(t, r)
		seen += keys
		if cursor == "0" {
			break
		}
	}
	runtime.ReadMemStats(&m1)
	if seen != 80 {
		t.Fatalf("SCAN returned %d keys, want 80", seen)
	}
	return m1.TotalAlloc - m0.TotalAlloc
}

// readScanReply reads a SCAN reply: its cursor and how many keys it held.
func readScanReply(t *testing.T, r *bufio.Reader) (string, int) {
	t.Helper()
	read := func() string {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSuffix(line, "\r\n")
	}
	if h := read(); h != "*2" {
		t.Fatalf("SCAN answered %q", h)
	}
	read() // the cursor's length
	cursor := read()
	var n int
	if _, err := fmt.Sscanf(read(), "*%d", &n); err != nil {
		t.Fatal(err)
	}
	for range n * 2 {
		read()
	}
	return cursor, n
}

// TestRedisGlobBounded protects the glob matcher's bounds on the Redis
// port: a pattern over 64 KiB is refused, and a 64 KiB pattern that makes
// every key cost its full len(pattern)·len(key) steps fails once the
// command's matching passes its step budget (before: SCAN with it over 20
// keys of 4 KiB ran for seconds and answered no keys; with COUNT 10000
// and a 1 MiB pattern, hours).
func TestRedisGlobBounded(t *testing.T) {
	n, kv := budgetNode(t)
	for i := range 20 {
		key := fmt.Appendf(nil, "g%02d", i)
		key = append(key, bytes.Repeat([]byte("a"), 4000)...)
		if _, err := kv.Put(context.Background(), &concordpb.PutRequest{Key: key, Value: []byte("v")}); err != nil {
			t.Fatal(err)
		}
	}
	nc, r := redisDial(t, n)
	// A class of 65,530 bytes (a 65,534-byte pattern), tried at every byte of every key.
	slow := "*[" + strings.Repeat("a", 64<<10-6) + "]b"
	if _, err := io.WriteString(nc, command("SCAN", "0", "MATCH", slow, "COUNT", "1000")+
		command("KEYS", strings.Repeat("a", 64<<10+1))+command("KEYS", "g0*")); err != nil {
		t.Fatal(err)
	}
	if line, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(line, "-ERR pattern too complex") {
		t.Fatalf("SCAN with a 64 KiB pathological pattern answered %q, %v", line, err)
	}
	if line, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(line, "-ERR pattern is longer than 65536 bytes") {
		t.Fatalf("KEYS with a pattern over 64 KiB answered %q, %v", line, err)
	}
	if line, err := r.ReadString('\n'); err != nil || line != "*10\r\n" {
		t.Fatalf("KEYS g0* answered %q, %v; want its 10 keys", line, err)
	}
}
