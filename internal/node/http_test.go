package node

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/version"
)

func withHTTP(token string) func(*Config) {
	return func(c *Config) {
		c.HTTPAddr = "127.0.0.1:0"
		c.AuthToken = token
	}
}

func httpGet(t *testing.T, url, token string) (int, string) {
	t.Helper()
	if token == "" {
		return httpGetAuth(t, url, "")
	}
	return httpGetAuth(t, url, "Bearer "+token)
}

// awaitReady polls /readyz until it answers 200.
func awaitReady(t *testing.T, base string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, body := httpGet(t, base+"/readyz", "")
		if code == http.StatusOK {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz still %d: %s", code, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// metricValue returns the value of the sample whose name and labels match
// series exactly as exposed (labels in Prometheus's sorted order).
func metricValue(t *testing.T, exposition, series string) float64 {
	t.Helper()
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`)
	m := re.FindStringSubmatch(exposition)
	if m == nil {
		t.Fatalf("no sample %s in /metrics", series)
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestHTTPFrontDoor checks every route of --http-addr on a live node: the
// probes, metrics that move when the node serves a write, and the status
// document.
func TestHTTPFrontDoor(t *testing.T) {
	n := startSolo(t, withHTTP(""))
	base := "http://" + n.HTTPAddr()
	if code, body := httpGet(t, base+"/healthz", ""); code != http.StatusOK || body != "ok\n" {
		t.Fatalf("/healthz = %d %q", code, body)
	}
	awaitReady(t, base)

	conn, err := grpc.NewClient(n.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range 3 {
		if _, err := concordpb.NewKVClient(conn).Put(ctx, &concordpb.PutRequest{Key: []byte("k" + strconv.Itoa(i)), Value: []byte("v")}); err != nil {
			t.Fatal(err)
		}
	}

	respCommands(t, n.Addr(), "SET r 1", "GET r", "NOSUCHCOMMAND x")
	if _, err := concordpb.NewKVClient(conn).Get(ctx, &concordpb.GetRequest{Key: []byte("k0")}); err != nil {
		t.Fatal(err) // linearizable: a ReadIndex round on shard 1
	}

	code, m := httpGet(t, base+"/metrics", "")
	if code != http.StatusOK {
		t.Fatalf("/metrics = %d", code)
	}
	if got := metricValue(t, m, `concord_shard_read_rounds_total{shard="1"}`); got < 1 {
		t.Errorf("shard 1's read rounds = %v, want at least the Get's", got)
	}
	for series, want := range map[string]float64{
		`concord_request_duration_seconds_count{code="OK",op="set",protocol="resp"}`:      1,
		`concord_request_duration_seconds_count{code="OK",op="get",protocol="resp"}`:      1,
		`concord_request_duration_seconds_count{code="ERR",op="unknown",protocol="resp"}`: 1,
	} {
		if got := metricValue(t, m, series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
	if got := metricValue(t, m, `concord_request_duration_seconds_count{code="OK",op="KV.Put",protocol="grpc"}`); got != 3 {
		t.Errorf("KV.Put requests = %v, want 3", got)
	}
	if got := metricValue(t, m, `concord_proposal_duration_seconds_count{outcome="ok"}`); got < 3 {
		t.Errorf("proposals = %v, want at least the 3 puts", got)
	}
	if got := metricValue(t, m, `concord_storage_commit_duration_seconds_count{synced="true"}`); got < 3 {
		t.Errorf("synced commits = %v, want at least one per put", got)
	}
	// Each put is at least one Ready and three records (its log entry,
	// value and session record) on this one node.
	if got := metricValue(t, m, "concord_raft_readies_total"); got < 3 {
		t.Errorf("Ready cycles = %v, want at least one per put", got)
	}
	if got := metricValue(t, m, "concord_storage_records_total"); got < 9 {
		t.Errorf("committed records = %v, want at least three per put", got)
	}
	// One node: the meta shard and the one user shard, both led here.
	for series, want := range map[string]float64{
		"concord_replicas": 2, "concord_leaders": 2, "concord_ready": 1, "concord_placement_leader": 1,
		`concord_cluster_nodes{state="up"}`: 1, `concord_cluster_nodes{state="dead"}`: 0,
		`concord_shard_is_leader{shard="1"}`: 1, `concord_shard_apply_lag_entries{shard="1"}`: 0,
	} {
		if got := metricValue(t, m, series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
	if metricValue(t, m, `concord_shard_applied_index{shard="1"}`) < 3 {
		t.Error("shard 1's applied index does not count the puts")
	}
	if metricValue(t, m, `concord_shard_raft_log_applied_entries{shard="1"}`) < 3 {
		t.Error("shard 1's raft log does not hold the puts (a fresh log is truncated only past 100 entries)")
	}
	// Storage's block cache, flush and compaction counters, the absorbed
	// writes and the coalesced INCRs are there (a
	// fresh node's data is all in its memtable, and these puts overwrite
	// nothing, so they need not have moved yet).
	for _, series := range []string{"concord_storage_block_cache_hits_total", "concord_storage_block_cache_misses_total", "concord_storage_block_cache_bytes",
		"concord_storage_flushed_bytes_total", "concord_storage_compacted_bytes_total", "concord_storage_flushes_total",
		"concord_writes_absorbed_total", "concord_incrs_coalesced_total"} {
		if got := metricValue(t, m, series); got < 0 {
			t.Errorf("%s = %v, want a count", series, got)
		}
	}
	// Every documented label value of a counter is there from the start,
	// at 0 where its event has not happened: a node alone sends and
	// receives no snapshot and no raft frame, and reconciles nothing.
	// They once appeared only at their first event.
	for _, series := range []string{
		`concord_snapshot_bytes_total{direction="sent"}`, `concord_snapshot_bytes_total{direction="received"}`,
		`concord_raft_frames_total{direction="sent"}`, `concord_raft_frames_total{direction="received"}`,
		`concord_raft_messages_total{direction="sent"}`, `concord_raft_messages_total{direction="received"}`,
		`concord_reconciled_total{outcome="applied"}`, `concord_reconciled_total{outcome="superseded"}`,
		`concord_reconciled_total{outcome="refused"}`,
	} {
		if got := metricValue(t, m, series); got != 0 {
			t.Errorf("%s = %v on a node alone, want 0", series, got)
		}
	}
	for _, path := range []string{"lease", "lease_fast", "round"} {
		if got := metricValue(t, m, `concord_linearizable_reads_total{path="`+path+`"}`); got < 0 {
			t.Errorf("linearizable reads by %s = %v, want a count", path, got)
		}
	}
	if got := metricValue(t, m, "concord_binary_version"); got != float64(version.Binary) {
		t.Errorf("concord_binary_version = %v, want %d", got, version.Binary)
	}
	if got := metricValue(t, m, "concord_cluster_version"); got < 0 || got > float64(version.Binary) {
		t.Errorf("concord_cluster_version = %v, want 0 (not learned yet) to %d", got, version.Binary)
	}
	if !strings.Contains(m, "go_goroutines ") || !strings.Contains(m, "process_cpu_seconds_total ") {
		t.Error("/metrics lacks the Go runtime and process collectors")
	}

	code, body := httpGet(t, base+"/api/status", "")
	if code != http.StatusOK {
		t.Fatalf("/api/status = %d %s", code, body)
	}
	var st concordpb.StatusResponse
	if err := protojson.Unmarshal([]byte(body), &st); err != nil {
		t.Fatalf("/api/status is not a StatusResponse: %v", err)
	}
	if len(st.GetNodes()) != 1 || len(st.GetShards()) != 2 || st.GetAnsweredByNodeId() != uint64(n.ID()) {
		t.Fatalf("/api/status: %d nodes, %d shards, answered by %d; want 1, 2, %d",
			len(st.GetNodes()), len(st.GetShards()), st.GetAnsweredByNodeId(), n.ID())
	}
	if code, _ := httpGet(t, base+"/nope", ""); code != http.StatusNotFound {
		t.Errorf("unknown route = %d, want 404", code)
	}
}

// TestHTTPAuthAndGarbage: with a token, /api/status needs it and the probes
// do not; bytes that are not HTTP get 400 and leave the node serving.
func TestHTTPAuthAndGarbage(t *testing.T) {
	const token = "s3cret"
	n := startSolo(t, withHTTP(token))
	base := "http://" + n.HTTPAddr()
	awaitReady(t, base)
	if code, body := httpGet(t, base+"/api/status", ""); code != http.StatusUnauthorized || !strings.Contains(body, "Bearer") {
		t.Errorf("/api/status without the token = %d %q, want 401 naming the header", code, body)
	}
	if code, _ := httpGet(t, base+"/api/status", "wrong"); code != http.StatusUnauthorized {
		t.Errorf("/api/status with a wrong token = %d, want 401", code)
	}
	if code, _ := httpGet(t, base+"/api/status", token); code != http.StatusOK {
		t.Errorf("/api/status with the token = %d, want 200", code)
	}

	c, err := net.Dial("tcp", n.HTTPAddr())
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte("\x00\xff garbage that is not HTTP\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	reply, _ := io.ReadAll(c)
	c.Close()
	if !strings.HasPrefix(string(reply), "HTTP/1.1 400") {
		t.Errorf("garbage got %q, want a 400", reply)
	}
	if code, _ := httpGet(t, base+"/healthz", ""); code != http.StatusOK {
		t.Errorf("/healthz after garbage = %d", code)
	}
}

// respCommands sends inline Redis commands to addr (the main port speaks
// RESP too) and reads one reply line each.
func respCommands(t *testing.T, addr string, cmds ...string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 4096)
	for _, cmd := range cmds {
		if _, err := io.WriteString(c, cmd+"\r\n"); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Read(buf); err != nil {
			t.Fatalf("%s: %v", cmd, err)
		}
	}
}

// TestHTTPIdleConnectionClosed protects the HTTP server's deadlines: a
// keep-alive connection that sends no request after its first is closed
// by the node after the idle timeout (before: held until the client
// closed it), while it answered the request it sent.
func TestHTTPIdleConnectionClosed(t *testing.T) {
	n := startSolo(t, withHTTP(""), func(c *Config) { c.HTTPIdleTimeout = 200 * time.Millisecond })
	c, err := net.Dial("tcp", n.HTTPAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: node\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(c)
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz = %d", resp.StatusCode)
	}
	if _, err := r.ReadByte(); err != io.EOF {
		t.Fatalf("the idle connection was not closed by the node: read %v, want EOF", err)
	}
}

// TestBearerSchemeAnyCase: the "Bearer" scheme of an Authorization value
// is case-insensitive (RFC 7235 section 2.1, RFC 6750 section 2.1), on
// both doors that read it: HTTP /api/status and gRPC metadata. Before,
// only "Bearer" itself was taken, and a client that sent "bearer TOKEN"
// was refused with the right token.
func TestBearerSchemeAnyCase(t *testing.T) {
	const token = "s3cret"
	n := startSolo(t, withHTTP(token))
	base := "http://" + n.HTTPAddr()
	awaitReady(t, base)
	conn, err := grpc.NewClient(n.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cl := concordpb.NewClusterClient(conn)
	for _, scheme := range []string{"Bearer", "bearer", "BEARER", "bEaReR"} {
		code, body := httpGetAuth(t, base+"/api/status", scheme+" "+token)
		if code != http.StatusOK {
			t.Errorf("HTTP /api/status with %q TOKEN = %d %q, want 200", scheme, code, body)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", scheme+" "+token)
		_, err := cl.Status(ctx, &concordpb.StatusRequest{})
		cancel()
		if err != nil {
			t.Errorf("gRPC Status with %q TOKEN: %v, want an answer", scheme, err)
		}
	}
	// The scheme's case is free; the token's is not.
	if code, _ := httpGetAuth(t, base+"/api/status", "bearer S3CRET"); code != http.StatusUnauthorized {
		t.Errorf("HTTP /api/status with the token in another case = %d, want 401", code)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "bearer S3CRET")
	if _, err := cl.Status(ctx, &concordpb.StatusRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("gRPC Status with the token in another case: %v, want Unauthenticated", err)
	}
}

// httpGetAuth gets url with auth as its Authorization value (none if
// empty).
func httpGetAuth(t *testing.T, url, auth string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}
