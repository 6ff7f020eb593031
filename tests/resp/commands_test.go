package resp

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/routing"
	"github.com/concord-kv/concord/internal/testcluster"
)

// TestCommands runs every command of docs/redis.md that needs no
// read-modify-write op, over RESP3 and RESP2, against a 3-node cluster,
// through every node.
func TestCommands(t *testing.T) {
	t.Parallel()
	c := startCluster(t, testcluster.Options{})
	ctx := ctxT(t)
	r3 := client(t, c, 0)
	r2 := client(t, c, 1, resp2)

	t.Run("connection", func(t *testing.T) {
		for _, rc := range []*redis.Client{r3, r2} {
			if got := must(rc.Ping(ctx).Result())(t, "PING"); got != "PONG" {
				t.Errorf("PING = %q", got)
			}
			if got := must(rc.Echo(ctx, "a\r\nb\x00").Result())(t, "ECHO"); got != "a\r\nb\x00" {
				t.Errorf("ECHO = %q", got)
			}
			if err := rc.Do(ctx, "SELECT", 0).Err(); err != nil {
				t.Errorf("SELECT 0: %v", err)
			}
			wantErr(t, "SELECT 1", rc.Do(ctx, "SELECT", 1).Err(), "ERR DB index is out of range")
			wantErr(t, "unknown command", rc.Do(ctx, "LPUSH", "l", "x").Err(), "ERR unknown command 'LPUSH', with args beginning with: 'l' 'x'")
			wantErr(t, "wrong arity", rc.Do(ctx, "GET").Err(), "ERR wrong number of arguments for 'get' command")
			wantErr(t, "SET syntax", rc.Do(ctx, "SET", "k", "v", "BOGUS").Err(), "ERR syntax error")
			wantErr(t, "AUTH without token", rc.Do(ctx, "AUTH", "x").Err(), "ERR AUTH <password> called without any password")
		}
		hello := must(r3.Do(ctx, "HELLO", "3").Result())(t, "HELLO 3")
		if m, ok := hello.(map[any]any); !ok || m["proto"] != int64(3) || m["server"] != "redis" {
			t.Errorf("HELLO 3 = %#v, want a map with proto 3", hello)
		}
		wantErr(t, "HELLO 4", r3.Do(ctx, "HELLO", "4").Err(), "NOPROTO")
	})

	t.Run("client", func(t *testing.T) {
		conn := r3.Conn()
		defer conn.Close()
		must(conn.ClientSetName(ctx, "tester").Result())(t, "CLIENT SETNAME")
		if got := must(conn.ClientGetName(ctx).Result())(t, "CLIENT GETNAME"); got != "tester" {
			t.Errorf("CLIENT GETNAME = %q", got)
		}
		id := must(conn.ClientID(ctx).Result())(t, "CLIENT ID")
		list := must(conn.ClientList(ctx).Result())(t, "CLIENT LIST")
		if !strings.Contains(list, fmt.Sprintf("id=%d ", id)) || !strings.Contains(list, "name=tester") {
			t.Errorf("CLIENT LIST has no line for id %d named tester:\n%s", id, list)
		}
		info := must(conn.Do(ctx, "CLIENT", "INFO").Text())(t, "CLIENT INFO")
		if !strings.Contains(info, fmt.Sprintf("id=%d ", id)) {
			t.Errorf("CLIENT INFO = %q", info)
		}
		wantErr(t, "CLIENT FOO", conn.Do(ctx, "CLIENT", "FOO").Err(), "ERR unknown subcommand")
	})

	t.Run("server", func(t *testing.T) {
		n := must(r3.CommandList(ctx, nil).Result())(t, "COMMAND COUNT")
		if !slices.Contains(n, "get") || !slices.Contains(n, "mset") {
			t.Errorf("COMMAND LIST = %v", n)
		}
		cmds := must(r2.Command(ctx).Result())(t, "COMMAND")
		if g := cmds["get"]; g == nil || g.Arity != 2 || g.FirstKeyPos != 1 || !g.ReadOnly {
			t.Errorf("COMMAND get = %+v", g)
		}
		if m := cmds["mset"]; m == nil || m.Arity != -3 || m.StepCount != 2 {
			t.Errorf("COMMAND mset = %+v", m)
		}
		if err := r3.Do(ctx, "COMMAND", "DOCS", "get").Err(); err != nil {
			t.Errorf("COMMAND DOCS: %v", err)
		}
		cfg := must(r3.ConfigGet(ctx, "save").Result())(t, "CONFIG GET")
		if v, ok := cfg["save"]; !ok || v != "" {
			t.Errorf("CONFIG GET save = %v", cfg)
		}
		info := must(r3.Info(ctx).Result())(t, "INFO")
		for _, want := range []string{"# Server", "redis_version:", "concord_node_id:", "uptime_in_seconds:",
			"# Clients", "connected_clients:", "# Persistence", "storage_engine:pebble", "# Replication", "concord_shards_led:"} {
			if !strings.Contains(info, want) {
				t.Errorf("INFO lacks %q:\n%s", want, info)
			}
		}
		if got := must(r2.Info(ctx, "clients").Result())(t, "INFO clients"); strings.Contains(got, "# Server") || !strings.Contains(got, "connected_clients:") {
			t.Errorf("INFO clients = %q", got)
		}
	})

	t.Run("strings", func(t *testing.T) {
		// Written through node 0, read through every node: any node
		// answers any key.
		must(r3.Set(ctx, "s:a", "1", 0).Result())(t, "SET")
		for i := range c.N() {
			rc := client(t, c, i)
			if got := must(rc.Get(ctx, "s:a").Result())(t, "GET"); got != "1" {
				t.Errorf("node %d: GET s:a = %q", i, got)
			}
		}
		if _, err := r3.Get(ctx, "s:missing").Result(); err != redis.Nil {
			t.Errorf("GET of a missing key: %v, want redis.Nil", err)
		}
		if _, err := r2.Get(ctx, "s:missing").Result(); err != redis.Nil {
			t.Errorf("RESP2 GET of a missing key: %v, want redis.Nil", err)
		}
		if got := must(r3.SetArgs(ctx, "s:a", "2", redis.SetArgs{Get: true}).Result())(t, "SET GET"); got != "1" {
			t.Errorf("SET GET = %q, want the old value 1", got)
		}
		must(r3.MSet(ctx, "s:m1", "x", "s:m2", "y", "s:m3", "z").Result())(t, "MSET")
		got := must(r2.MGet(ctx, "s:m1", "s:missing", "s:m3").Result())(t, "MGET")
		if len(got) != 3 || got[0] != "x" || got[1] != nil || got[2] != "z" {
			t.Errorf("MGET = %v", got)
		}
		if n := must(r3.Exists(ctx, "s:m1", "s:m2", "s:missing", "s:m1").Result())(t, "EXISTS"); n != 3 {
			t.Errorf("EXISTS = %d, want 3", n)
		}
		if typ := must(r3.Type(ctx, "s:m1").Result())(t, "TYPE"); typ != "string" {
			t.Errorf("TYPE = %q", typ)
		}
		if typ := must(r3.Type(ctx, "s:missing").Result())(t, "TYPE"); typ != "none" {
			t.Errorf("TYPE missing = %q", typ)
		}
		if n := must(r3.Del(ctx, "s:m1", "s:m2", "s:missing").Result())(t, "DEL"); n != 2 {
			t.Errorf("DEL = %d, want 2", n)
		}
		if n := must(r3.Unlink(ctx, "s:m3").Result())(t, "UNLINK"); n != 1 {
			t.Errorf("UNLINK = %d, want 1", n)
		}
		if n := must(r3.StrLen(ctx, "s:a").Result())(t, "STRLEN"); n != 1 {
			t.Errorf("STRLEN = %d", n)
		}
		must(r3.Set(ctx, "s:r", "Hello World", 0).Result())(t, "SET")
		for _, tc := range []struct {
			start, end int64
			want       string
		}{{0, 4, "Hello"}, {-5, -1, "World"}, {0, -1, "Hello World"}, {5, 3, ""}, {100, 200, ""}} {
			if got := must(r3.GetRange(ctx, "s:r", tc.start, tc.end).Result())(t, "GETRANGE"); got != tc.want {
				t.Errorf("GETRANGE %d %d = %q, want %q", tc.start, tc.end, got, tc.want)
			}
		}
		wantErr(t, "SETEX 0", r3.Do(ctx, "SETEX", "s:e", 0, "v").Err(), "ERR invalid expire time in 'setex' command")
		wantErr(t, "SET EX -1", r3.Do(ctx, "SET", "s:e", "v", "EX", -1).Err(), "ERR invalid expire time in 'set' command")
		wantErr(t, "SET NX XX", r3.Do(ctx, "SET", "s:e", "v", "NX", "XX").Err(), "ERR syntax error")
	})

	t.Run("binary and limits", func(t *testing.T) {
		k, v := "b:\x00\r\n\xff", string(bytes.Repeat([]byte{0, '\r', '\n', 0xff}, 1000))
		must(r3.Set(ctx, k, v, 0).Result())(t, "SET binary")
		if got := must(r2.Get(ctx, k).Result())(t, "GET binary"); got != v {
			t.Errorf("binary value read back differs (%d bytes, want %d)", len(got), len(v))
		}
		wantErr(t, "key over limit", r3.Set(ctx, strings.Repeat("k", 4097), "v", 0).Err(), "ERR key is 4097 bytes; the limit is 4096")
		wantErr(t, "value over limit", r3.Set(ctx, "b:big", strings.Repeat("v", 1<<20+1), 0).Err(), "ERR value is 1048577 bytes")
		wantErr(t, "empty key", r3.Set(ctx, "", "v", 0).Err(), "ERR key is empty")
		if n := must(r3.Exists(ctx, "b:big").Result())(t, "EXISTS big"); n != 0 {
			t.Errorf("a refused value was stored")
		}
		// A value at the limit passes.
		must(r3.Set(ctx, "b:max", strings.Repeat("v", 1<<20), 0).Result())(t, "SET 1 MiB")
	})

	t.Run("multi", func(t *testing.T) {
		// Keys in one shard: one batch, atomic.
		keys := keysInOneShard(t, c, "tx:", 3)
		pipe := r3.TxPipeline()
		pipe.Set(ctx, keys[0], "a", 0)
		pipe.Set(ctx, keys[1], "b", 0)
		get := pipe.Get(ctx, keys[0])
		mget := pipe.MGet(ctx, keys[0], keys[1], keys[2])
		del := pipe.Del(ctx, keys[1])
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatalf("MULTI/EXEC in one shard: %v", err)
		}
		if get.Val() != "a" || len(mget.Val()) != 3 || mget.Val()[1] != "b" || mget.Val()[2] != nil || del.Val() != 1 {
			t.Errorf("EXEC results: get %q, mget %v, del %d", get.Val(), mget.Val(), del.Val())
		}
		// Keys in two shards: CROSSSLOT, nothing applied.
		other := keyInOtherShard(t, c, keys[0])
		pipe = r3.TxPipeline()
		pipe.Set(ctx, keys[2], "x", 0)
		pipe.Set(ctx, other, "y", 0)
		_, err := pipe.Exec(ctx)
		wantErr(t, "MULTI across shards", err, "CROSSSLOT")
		if n := must(r3.Exists(ctx, keys[2], other).Result())(t, "EXISTS"); n != 0 {
			t.Errorf("a refused transaction stored %d keys", n)
		}
		// A command of the wrong arity inside MULTI aborts EXEC, as in
		// Redis (a bad argument is queued: TestRedisServerDifferential).
		conn := r3.Conn()
		defer conn.Close()
		must(conn.Do(ctx, "MULTI").Result())(t, "MULTI")
		must(conn.Do(ctx, "SET", keys[2], "z").Result())(t, "queue")
		wantErr(t, "queued arity error", conn.Do(ctx, "SET", keys[2]).Err(), "ERR wrong number of arguments")
		wantErr(t, "EXEC after error", conn.Do(ctx, "EXEC").Err(), "EXECABORT")
		if n := must(r3.Exists(ctx, keys[2]).Result())(t, "EXISTS"); n != 0 {
			t.Errorf("an aborted transaction applied")
		}
		wantErr(t, "EXEC without MULTI", conn.Do(ctx, "EXEC").Err(), "ERR EXEC without MULTI")
		must(conn.Do(ctx, "MULTI").Result())(t, "MULTI")
		must(conn.Do(ctx, "DISCARD").Result())(t, "DISCARD")
	})

	t.Run("pipeline", func(t *testing.T) {
		// 1,000 commands in one pipeline, writes and reads of the same
		// keys interleaved: every reply in order, each read seeing the
		// write before it.
		pipe := r3.Pipeline()
		var gets []*redis.StringCmd
		for i := range 500 {
			k := fmt.Sprintf("p:%d", i%50)
			pipe.Set(ctx, k, fmt.Sprint(i), 0)
			gets = append(gets, pipe.Get(ctx, k))
		}
		cmds, err := pipe.Exec(ctx)
		if err != nil || len(cmds) != 1000 {
			t.Fatalf("pipeline of 1,000: %d replies, %v", len(cmds), err)
		}
		for i, g := range gets {
			if g.Val() != fmt.Sprint(i) {
				t.Fatalf("GET %d in the pipeline = %q, want %d (the SET just before it)", i, g.Val(), i)
			}
		}
		// RESP2 too, with every key distinct (all concurrent).
		pipe = r2.Pipeline()
		for i := range 1000 {
			pipe.Set(ctx, fmt.Sprintf("p2:%d", i), i, 0)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatalf("RESP2 pipeline: %v", err)
		}
		got := must(r3.MGet(ctx, "p2:0", "p2:999").Result())(t, "MGET")
		if got[0] != "0" || got[1] != "999" {
			t.Errorf("after the pipeline: MGET = %v", got)
		}
	})

	t.Run("pipelined reads", func(t *testing.T) {
		testPipelinedReads(t, c)
	})

	t.Run("keyspace", func(t *testing.T) {
		for i := range 25 {
			must(r3.Set(ctx, fmt.Sprintf("ks:%02d", i), "v", 0).Result())(t, "SET")
		}
		var seen []string
		iter := r2.Scan(ctx, 0, "ks:*", 7).Iterator()
		for iter.Next(ctx) {
			seen = append(seen, iter.Val())
		}
		if err := iter.Err(); err != nil {
			t.Fatalf("SCAN: %v", err)
		}
		slices.Sort(seen)
		if len(slices.Compact(seen)) != 25 {
			t.Errorf("SCAN MATCH ks:* returned %d distinct keys, want 25: %v", len(seen), seen)
		}
		keys := must(r3.Keys(ctx, "ks:1?").Result())(t, "KEYS")
		if len(keys) != 10 {
			t.Errorf("KEYS ks:1? = %v", keys)
		}
		if n := must(r3.DBSize(ctx).Result())(t, "DBSIZE"); n < 25 {
			t.Errorf("DBSIZE = %d, want at least 25", n)
		}
		if k := must(r3.RandomKey(ctx).Result())(t, "RANDOMKEY"); k == "" {
			t.Errorf("RANDOMKEY = %q", k)
		}
		wantErr(t, "FLUSHDB", r3.FlushDB(ctx).Err(), "ERR FLUSHDB is disabled")
		wantErr(t, "FLUSHALL", r3.FlushAll(ctx).Err(), "ERR FLUSHALL is disabled")
		wantErr(t, "SCAN bad cursor", r3.Do(ctx, "SCAN", "12345678").Err(), "ERR invalid cursor")
		// Stale reads serve the same keys from the local replica.
		conn := r3.Conn()
		defer conn.Close()
		must(conn.Do(ctx, "CONCORD.CONSISTENCY", "stale").Result())(t, "CONCORD.CONSISTENCY")
		testcluster.WaitFor(t, 10e9, func() error {
			if v, err := conn.Get(ctx, "ks:00").Result(); err != nil || v != "v" {
				return fmt.Errorf("stale GET = %q, %v", v, err)
			}
			if v, err := conn.MGet(ctx, "ks:00", "ks:01", "ks:none").Result(); err != nil || fmt.Sprint(v) != "[v v <nil>]" {
				return fmt.Errorf("stale MGET = %v, %v", v, err)
			}
			return nil
		})
		wantErr(t, "bad consistency", conn.Do(ctx, "CONCORD.CONSISTENCY", "eventual").Err(), "ERR CONCORD.CONSISTENCY takes")
	})
}

// keysInOneShard returns n keys with prefix that hash to one shard.
func keysInOneShard(t *testing.T, c *testcluster.Cluster, prefix string, n int) []string {
	t.Helper()
	tab := routingTable(t, c)
	first := prefix + "0"
	want := tab.Lookup([]byte(first)).GetShardId()
	out := []string{first}
	for i := 1; len(out) < n; i++ {
		k := fmt.Sprintf("%s%d", prefix, i)
		if tab.Lookup([]byte(k)).GetShardId() == want {
			out = append(out, k)
		}
	}
	return out
}

// keyInOtherShard returns a key whose shard is not key's.
func keyInOtherShard(t *testing.T, c *testcluster.Cluster, key string) string {
	t.Helper()
	tab := routingTable(t, c)
	for i := 0; ; i++ {
		k := fmt.Sprintf("other:%d", i)
		if tab.Lookup([]byte(k)).GetShardId() != tab.Lookup([]byte(key)).GetShardId() {
			return k
		}
	}
}

func routingTable(t *testing.T, c *testcluster.Cluster) *routing.Table {
	t.Helper()
	rt, err := c.RoutingTable(ctxT(t), 0)
	if err != nil {
		t.Fatal(err)
	}
	var descs []*concordpb.ShardDescriptor
	for _, s := range rt.GetShards() {
		descs = append(descs, s.GetShard())
	}
	return routing.NewTable(descs)
}

// TestConcordCommands: the extensions the CS739 library uses, and RESP on
// the node's gRPC port.
func TestConcordCommands(t *testing.T) {
	t.Parallel()
	c := startCluster(t, testcluster.Options{})
	ctx := ctxT(t)
	// RESP on the gRPC port (told apart by the first bytes).
	rc := redis.NewClient(&redis.Options{Addr: c.Addr(2), MaxRetries: -1})
	t.Cleanup(func() { rc.Close() })
	members := must(rc.Do(ctx, "CONCORD.MEMBERS").StringSlice())(t, "CONCORD.MEMBERS")
	slices.Sort(members)
	want := c.Endpoints()
	slices.Sort(want)
	if !slices.Equal(members, want) {
		t.Errorf("CONCORD.MEMBERS = %v, want %v", members, want)
	}
	// A retried session write is answered from the session table: INCR
	// applies once.
	for range 3 {
		if n := must(rc.Do(ctx, "CONCORD.SESSION", 77, 1, "INCR", "sess:n").Int64())(t, "CONCORD.SESSION INCR"); n != 1 {
			t.Errorf("retried CONCORD.SESSION 77 1 INCR = %d, want 1 each time", n)
		}
	}
	if n := must(rc.Do(ctx, "CONCORD.SESSION", 77, 2, "INCR", "sess:n").Int64())(t, "next seq"); n != 2 {
		t.Errorf("CONCORD.SESSION 77 2 INCR = %d, want 2", n)
	}
	if v, err := rc.Do(ctx, "CONCORD.SESSION", 78, 1, "SET", "sess:k", "a", "GET").Result(); err != redis.Nil {
		t.Errorf("first SET GET = %v, %v; want nil (no previous value)", v, err)
	}
	if v, err := rc.Do(ctx, "CONCORD.SESSION", 78, 1, "SET", "sess:k", "b", "GET").Result(); err != redis.Nil {
		t.Errorf("retried SET GET = %v, %v; want the first answer, nil", v, err)
	}
	wantErr(t, "session read", rc.Do(ctx, "CONCORD.SESSION", 79, 1, "GET", "sess:k").Err(), "ERR CONCORD.SESSION runs a write command")
	wantErr(t, "session seq 0", rc.Do(ctx, "CONCORD.SESSION", 79, 0, "SET", "sess:k", "b").Err(), "ERR CONCORD.SESSION takes")
	wantErr(t, "fault refused", rc.Do(ctx, "CONCORD.FAULT", "HEAL").Err(), "ERR fault injection is disabled")
	// gRPC still works on the same port.
	if _, err := c.KV(2).Get(ctx, &concordpb.GetRequest{Key: []byte("sess:k")}); err != nil {
		t.Errorf("gRPC Get on the shared port: %v", err)
	}
}

// testPipelinedReads protects read chains (a pipeline's reads of one shard
// sent as one batch, one read barrier): through a node that does not lead
// the keys' shard (so the batch is forwarded) and through every node, in
// RESP2 and RESP3, a pipeline mixing reads and writes of one and several
// shards answers every command in order: absent and expired keys nil, a
// read after a write of its key sees it, errors mid-pipeline (wrong type
// of value for INCR, wrong arity, unknown command) answer that command
// alone. Reads stay linearizable: a pipeline of GETs sent after another
// node acknowledged a write sees it.
func testPipelinedReads(t *testing.T, c *testcluster.Cluster) {
	ctx := ctxT(t)
	keys := keysInOneShard(t, c, "pr:", 4)
	other := keyInOtherShard(t, c, keys[0])
	nodes := []int{followerOf(t, c, keys[0]), 0, 1, 2}
	tab := routingTable(t, c)
	huge := "" // over --max-key-bytes (4096), in keys[0]'s shard: in its read chain
	for i := 0; huge == ""; i++ {
		if k := fmt.Sprintf("%s%d", strings.Repeat("x", 5000), i); tab.Lookup([]byte(k)).GetShardId() == tab.Lookup([]byte(keys[0])).GetShardId() {
			huge = k
		}
	}
	for round, i := range nodes {
		for _, proto := range []int{3, 2} {
			rc := client(t, c, i, func(o *redis.Options) { o.Protocol = proto })
			k0, k1, k2, k3 := keys[0], keys[1], keys[2], keys[3]
			must(rc.Del(ctx, k0, k1, k2, k3, other).Result())(t, "DEL")
			must(rc.Set(ctx, k0, "a", 0).Result())(t, "SET")
			must(rc.Set(ctx, k3, "soon gone", 300*time.Millisecond).Result())(t, "SET PX")
			testcluster.WaitFor(t, 10*time.Second, func() error {
				if err := rc.Get(ctx, k3).Err(); err != redis.Nil {
					return fmt.Errorf("GET of a key set with PX 300 = %v, want nil once expired", err)
				}
				return nil
			})
			pipe := rc.Pipeline()
			cmds := []redis.Cmder{
				pipe.Get(ctx, k0), pipe.Get(ctx, k3), pipe.Get(ctx, k1), // present, expired, absent
				pipe.Set(ctx, k1, "b", 0), pipe.Get(ctx, k1), // a read after the write of its key
				pipe.Incr(ctx, k0), pipe.Get(ctx, k0), // an op error mid-pipeline
				pipe.MGet(ctx, k0, k1, k2, k3, other), pipe.Exists(ctx, k0, k1, k2, k3, other),
				pipe.Set(ctx, other, "o", 0), pipe.Get(ctx, other), pipe.Get(ctx, k0),
				pipe.Do(ctx, "GET"), pipe.Do(ctx, "NOSUCH", k0), // wrong arity, unknown command
				pipe.Del(ctx, k1), pipe.Get(ctx, k1), pipe.StrLen(ctx, k0), pipe.TTL(ctx, k0), pipe.Get(ctx, k0),
				// one read chain asking for the same keys again
				pipe.Get(ctx, k2), pipe.MGet(ctx, k0, k2, k0), pipe.Get(ctx, k2), pipe.Get(ctx, k0),
				// a key over the node's limit refuses the chain's batch: each
				// read then runs alone, and only this one fails
				pipe.Get(ctx, huge), pipe.Get(ctx, k0),
			}
			_, _ = pipe.Exec(ctx) // errors are per command, below
			var got []string
			for _, cmd := range cmds {
				if err := cmd.Err(); err != nil {
					got = append(got, "err:"+strings.SplitN(err.Error(), " ", 2)[0])
					continue
				}
				got = append(got, fmt.Sprint(cmdValue(cmd)))
			}
			want := []string{"a", "err:redis:", "err:redis:", "OK", "b", "err:ERR", "a",
				"[a b <nil> <nil> <nil>]", "2", "OK", "o", "a", "err:ERR", "err:ERR", "1", "err:redis:", "1", "-1ns", "a",
				"err:redis:", "[a <nil> a]", "err:redis:", "a", "err:ERR", "a"}
			if !slices.Equal(got, want) {
				t.Fatalf("round %d (node %d, RESP%d): replies\n%q\nwant\n%q", round, i, proto, got, want)
			}
		}
	}
	// Linearizable: each write acknowledged by one node is seen by every
	// GET of a pipeline sent afterwards to another.
	w, r := client(t, c, nodes[0]), client(t, c, (nodes[0]+1)%3)
	for n := range 20 {
		must(w.Set(ctx, keys[0], fmt.Sprint(n), 0).Result())(t, "SET")
		pipe := r.Pipeline()
		var gets []*redis.StringCmd
		for range 16 {
			gets = append(gets, pipe.Get(ctx, keys[0]))
		}
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatalf("pipeline of GETs: %v", err)
		}
		for _, g := range gets {
			if g.Val() != fmt.Sprint(n) {
				t.Fatalf("a pipelined GET after SET %d was acknowledged read %q", n, g.Val())
			}
		}
	}
}

// cmdValue is a command's value; redis.Nil for a nil reply shows as an
// error, so it is not here.
func cmdValue(cmd redis.Cmder) any {
	switch c := cmd.(type) {
	case *redis.StringCmd:
		return c.Val()
	case *redis.StatusCmd:
		return c.Val()
	case *redis.IntCmd:
		return c.Val()
	case *redis.SliceCmd:
		return c.Val()
	case *redis.DurationCmd:
		return c.Val()
	case *redis.Cmd:
		return c.Val()
	}
	return fmt.Sprintf("%T", cmd)
}

// followerOf returns the index of a node that does not lead key's shard,
// as the routing table says now (node 0 if no leader is known).
func followerOf(t *testing.T, c *testcluster.Cluster, key string) int {
	t.Helper()
	rt, err := c.RoutingTable(ctxT(t), 0)
	if err != nil {
		t.Fatal(err)
	}
	shard := routingTable(t, c).Lookup([]byte(key)).GetShardId()
	var leader uint64
	for _, r := range rt.GetShards() {
		if r.GetShard().GetShardId() == shard {
			leader = r.GetLeaderNodeId()
		}
	}
	for _, n := range rt.GetNodes() {
		if n.GetNodeId() != leader && leader != 0 {
			if i := c.Index(n.GetAddress()); i >= 0 {
				return i
			}
		}
	}
	return 0
}
