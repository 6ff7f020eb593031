package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/testcluster"
)

// TestBadInput: malformed requests get InvalidArgument (or another clear
// error) and change nothing; garbage and truncated HTTP/2 on the gRPC port
// do not take the node down.
func TestBadInput(t *testing.T) {
	t.Parallel()
	c := startCluster(t, testcluster.Options{})
	ctx := context.Background()
	cl := c.Client(t)
	kv := c.KV(0)

	// serves checks that node i still answers reads and writes itself.
	serves := func(i int, what string) {
		t.Helper()
		if !c.Running(i) {
			t.Fatalf("node %d is not running after %s", i, what)
		}
		k := []byte("alive-" + what)
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		pr, err := c.KV(i).Put(cctx, &concordpb.PutRequest{Key: k, Value: []byte("yes")})
		if err != nil {
			t.Fatalf("node %d does not serve a put after %s: %v", i, what, err)
		}
		resp, err := c.KV(i).Get(cctx, &concordpb.GetRequest{Key: k})
		if err != nil || !resp.GetFound() || string(resp.GetValue()) != "yes" {
			t.Fatalf("node %d after %s: put %q answered %v, then a linearizable get answered found=%v %v, %v",
				i, what, k, pr.GetHeader(), resp.GetFound(), resp.GetHeader(), err)
		}
	}

	t.Run("limits", func(t *testing.T) {
		for _, tc := range []struct {
			name       string
			key, value []byte
		}{
			{"empty key", nil, []byte("v")},
			{"key of 4097 bytes", bytes.Repeat([]byte("k"), 4097), []byte("v")},
			{"value of 1 MiB + 1", []byte("big-value"), bytes.Repeat([]byte("v"), 1<<20+1)},
		} {
			_, _, err := cl.Put(ctx, tc.key, tc.value)
			if status.Code(err) != codes.InvalidArgument {
				t.Errorf("put with %s: %v, want InvalidArgument", tc.name, err)
			}
			_, err = kv.Put(ctx, &concordpb.PutRequest{Key: tc.key, Value: tc.value})
			if status.Code(err) != codes.InvalidArgument {
				t.Errorf("raw put with %s: %v, want InvalidArgument", tc.name, err)
			}
		}
		// Nothing was stored: the value-too-large key is absent, and the
		// whole key space is empty.
		if _, found, err := cl.Get(ctx, []byte("big-value")); err != nil || found {
			t.Errorf("get of the key whose value was refused: found=%v, err=%v", found, err)
		}
		if kvs, err := cl.Scan(ctx, nil, nil, 0); err != nil || len(kvs) != 0 {
			t.Errorf("scan after refused puts: %d keys (%v), want none", len(kvs), err)
		}
		// Right at the limits is fine.
		if _, _, err := cl.Put(ctx, bytes.Repeat([]byte("k"), 4096), []byte("v")); err != nil {
			t.Errorf("put with a key of 4096 bytes: %v", err)
		}
		if _, _, err := cl.Put(ctx, []byte("max-value"), bytes.Repeat([]byte("v"), 1<<20)); err != nil {
			t.Errorf("put with a value of 1 MiB: %v", err)
		}
		_, _, err := cl.Get(ctx, nil)
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("get of the empty key: %v, want InvalidArgument", err)
		}
	})

	t.Run("batch across shards", func(t *testing.T) {
		rt, err := c.RoutingTable(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		a, b := testcluster.KeyInShard(rt, 2, "batch-"), testcluster.KeyInShard(rt, 9, "batch-")
		ops := []*concordpb.Op{
			{Type: concordpb.OpType_OP_PUT, Key: a, Value: []byte("x")},
			{Type: concordpb.OpType_OP_PUT, Key: b, Value: []byte("y")},
		}
		if _, err := cl.Batch(ctx, ops); status.Code(err) != codes.InvalidArgument {
			t.Errorf("batch with keys in shards 2 and 9: %v, want InvalidArgument", err)
		}
		for i := 0; i < c.N(); i++ { // every node refuses it, leader or not
			_, err := c.KV(i).Batch(ctx, &concordpb.BatchRequest{Ops: ops})
			if status.Code(err) != codes.InvalidArgument {
				t.Errorf("raw batch across shards to node %d: %v, want InvalidArgument", i, err)
			}
		}
		_, err = kv.Batch(ctx, &concordpb.BatchRequest{Ops: []*concordpb.Op{{Type: 42, Key: a}}})
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("batch with an unknown op type: %v, want InvalidArgument", err)
		}
		for _, k := range [][]byte{a, b} {
			if _, found, err := cl.Get(ctx, k); err != nil || found {
				t.Errorf("%q after the refused batch: found=%v, err=%v; want absent", k, found, err)
			}
		}
		// A batch within one shard applies.
		a2 := testcluster.KeyInShard(rt, 2, "batch-other-")
		res, err := cl.Batch(ctx, []*concordpb.Op{
			{Type: concordpb.OpType_OP_PUT, Key: a, Value: []byte("x")},
			{Type: concordpb.OpType_OP_PUT, Key: a2, Value: []byte("z")},
		})
		if err != nil || len(res) != 2 {
			t.Fatalf("batch within shard 2: %v, %v", res, err)
		}
	})

	t.Run("scan of a shard that does not exist", func(t *testing.T) {
		for i := 0; i < c.N(); i++ {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			_, err := c.KV(i).Scan(cctx, &concordpb.ScanRequest{OnlyShard: 9999})
			cancel()
			if status.Code(err) != codes.NotFound { // kv.proto: NotFound for a shard that does not exist
				t.Errorf("scan of shard 9999 on node %d: %v, want NotFound", i, err)
			}
			serves(i, "a scan of shard 9999")
		}
		if _, err := kv.Scan(ctx, &concordpb.ScanRequest{Start: []byte("b"), End: []byte("a")}); status.Code(err) != codes.InvalidArgument {
			t.Errorf("scan with start after end: %v, want InvalidArgument", err)
		}
	})

	t.Run("garbage on the gRPC port", func(t *testing.T) {
		junk := make([]byte, 64<<10)
		rand.Read(junk)
		for _, payload := range [][]byte{junk, []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), bytes.Repeat([]byte{0}, 4096)} {
			conn, err := net.DialTimeout("tcp", c.Addr(0), 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
			_, _ = conn.Write(payload) // the server may hang up before reading it all
			_, _ = io.Copy(io.Discard, conn)
			conn.Close()
		}
		serves(0, "garbage")
	})

	t.Run("half an HTTP/2 frame, then gone", func(t *testing.T) {
		const preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
		// A SETTINGS frame header says 6 bytes of payload follow; send the
		// header and half the payload.
		half := []byte{0, 0, 6, 0x4, 0, 0, 0, 0, 0, 0, 0x3}
		var idle []net.Conn
		for i := 0; i < 5; i++ {
			conn, err := net.DialTimeout("tcp", c.Addr(0), 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := conn.Write(append([]byte(preface), half...)); err != nil {
				t.Fatal(err)
			}
			if i%2 == 0 {
				conn.(*net.TCPConn).SetLinger(0) // vanish: reset, not a clean close
				conn.Close()
			} else {
				idle = append(idle, conn) // stay connected, silent, while the node serves others
			}
		}
		serves(0, "truncated HTTP/2 frames")
		for _, conn := range idle {
			conn.Close()
		}
		serves(0, "truncated HTTP/2 connections closed")
	})

	for i := 0; i < c.N(); i++ {
		if !c.Running(i) {
			t.Fatalf("node %d is down at the end", i)
		}
	}
}
