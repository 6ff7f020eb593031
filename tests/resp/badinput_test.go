package resp

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/concord-kv/concord/internal/resp"
	"github.com/concord-kv/concord/internal/testcluster"
)

// raw is a bare TCP connection to a node's Redis port.
type raw struct {
	t  *testing.T
	nc net.Conn
	br *bufio.Reader
}

func dialRaw(t *testing.T, addr string) *raw {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(30 * time.Second))
	return &raw{t: t, nc: nc, br: bufio.NewReader(nc)}
}

func (r *raw) send(s string) {
	r.t.Helper()
	if _, err := r.nc.Write([]byte(s)); err != nil {
		r.t.Fatalf("write %q: %v", s, err)
	}
}

func (r *raw) reply() resp.Value {
	r.t.Helper()
	v, err := resp.ParseReply(r.br)
	if err != nil {
		r.t.Fatalf("reading a reply: %v", err)
	}
	return v
}

// closed checks that the server closes the connection (after any replies
// left to read).
func (r *raw) closed() {
	r.t.Helper()
	for {
		_, err := resp.ParseReply(r.br)
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || isReset(err) {
			return
		}
		if err != nil {
			r.t.Fatalf("waiting for the server to close: %v", err)
		}
	}
}

func isReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && strings.Contains(err.Error(), "reset")
}

// TestMalformedStreams: protocol errors get an error reply where possible
// and the connection closed; inline commands work; the node stays up and
// nothing is stored.
func TestMalformedStreams(t *testing.T) {
	t.Parallel()
	c := startCluster(t, testcluster.Options{ExtraArgs: []string{"--redis-output-buffer-limit=1048576"}})
	ctx := ctxT(t)
	addr := c.RedisAddr(0)

	t.Run("inline", func(t *testing.T) {
		r := dialRaw(t, addr)
		r.send("SET inline:k \"a b\"\r\nGET inline:k\r\nPING\n")
		if v := r.reply(); v.Str != "OK" {
			t.Errorf("inline SET = %v", v)
		}
		if v := r.reply(); v.Str != "a b" {
			t.Errorf("inline GET = %v", v)
		}
		if v := r.reply(); v.Str != "PONG" {
			t.Errorf("inline PING = %v", v)
		}
	})

	for _, tc := range []struct {
		name, in, wantErr string
	}{
		{"absurd bulk length", "*3\r\n$3\r\nSET\r\n$5\r\nbad:1\r\n$99999999999\r\n", "ERR Protocol error: invalid bulk length"},
		{"absurd multibulk length", "*99999999999\r\n$3\r\nSET\r\n", "ERR Protocol error: invalid multibulk length"},
		{"negative bulk length", "*2\r\n$3\r\nGET\r\n$-7\r\n", "ERR Protocol error: invalid bulk length"},
		{"missing $", "*2\r\n$3\r\nGET\r\n:5\r\n", "ERR Protocol error: expected '$'"},
		{"unbalanced quotes", "SET bad:2 \"open\r\n", "ERR Protocol error: unbalanced quotes"},
		{"bulk without CRLF", "*3\r\n$3\r\nSET\r\n$5\r\nbad:3\r\n$1\r\nvXX", "ERR Protocol error: bulk string not followed by CRLF"},
		{"inline too long", "SET bad:4 " + strings.Repeat("v", 70<<10) + "\r\n", "ERR Protocol error: too big inline request"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := dialRaw(t, addr)
			r.send("PING\r\n" + tc.in)
			if v := r.reply(); v.Str != "PONG" {
				t.Errorf("PING before the bad input = %v", v)
			}
			if v := r.reply(); v.Type != '-' || !strings.HasPrefix(v.Str, tc.wantErr) {
				t.Errorf("reply = %v, want an error starting %q", v, tc.wantErr)
			}
			r.closed()
		})
	}

	t.Run("truncated", func(t *testing.T) {
		r := dialRaw(t, addr)
		r.send("*3\r\n$3\r\nSET\r\n$5\r\nbad:5\r\n$10\r\nabc")
		r.nc.(*net.TCPConn).CloseWrite()
		r.closed()
	})

	t.Run("garbage", func(t *testing.T) {
		// Binary junk that is not RESP reads as an inline command: an
		// unknown one, answered with an error; the connection goes on.
		r := dialRaw(t, addr)
		junk := bytes.Repeat([]byte{0x16, 0x03, 0x01, 0xff, 0x00, '*', '$'}, 3000)
		r.send(string(junk) + "\r\nPING\r\n")
		if v := r.reply(); v.Type != '-' || !strings.HasPrefix(v.Str, "ERR unknown command") {
			t.Errorf("reply to junk = %v, want unknown command", v)
		}
		if v := r.reply(); v.Str != "PONG" {
			t.Errorf("PING after junk = %v", v)
		}
		// Junk after a multibulk header breaks the framing: closed.
		r = dialRaw(t, addr)
		r.send("*2\r\n" + string(junk))
		if v := r.reply(); v.Type != '-' || !strings.HasPrefix(v.Str, "ERR Protocol error") {
			t.Errorf("reply to framed junk = %v, want a protocol error", v)
		}
		r.closed()
	})

	t.Run("client that does not read", func(t *testing.T) {
		// 64 GETs of a 64 KiB value in one pipeline: 4 MiB of replies,
		// over the 1 MiB limit this cluster runs with. The node drops the
		// client rather than buffer it.
		rc := client(t, c, 0)
		must(rc.Set(ctx, "obl:v", strings.Repeat("v", 64<<10), 0).Result())(t, "SET")
		r := dialRaw(t, addr)
		r.send(strings.Repeat("*2\r\n$3\r\nGET\r\n$5\r\nobl:v\r\n", 64))
		r.closed()
		// A pipeline under the limit is answered.
		r = dialRaw(t, addr)
		r.send(strings.Repeat("*2\r\n$3\r\nGET\r\n$5\r\nobl:v\r\n", 8))
		for range 8 {
			if v := r.reply(); len(v.Str) != 64<<10 {
				t.Fatalf("GET under the output limit: %d bytes", len(v.Str))
			}
		}
	})

	// The nodes are up and serve; none of the bad commands stored a key.
	for i := range c.N() {
		rc := client(t, c, i)
		if !c.Running(i) {
			t.Fatalf("node %d is down after the bad input", i)
		}
		must(rc.Set(ctx, fmt.Sprintf("alive:%d", i), "yes", 0).Result())(t, "SET after bad input")
		if keys := must(rc.Keys(ctx, "bad:*").Result())(t, "KEYS"); len(keys) != 0 {
			t.Errorf("node %d: bad input stored %v", i, keys)
		}
	}
}

// TestAuthAndFlush: with --auth-token-file every command but AUTH and
// HELLO AUTH is refused until the token is given; --redis-enable-flush
// allows FLUSHDB.
func TestAuthAndFlush(t *testing.T) {
	t.Parallel()
	// The launcher writes the token file and gives it to its own readiness
	// probe, which gRPC now asks for too.
	c := startCluster(t, testcluster.Options{Nodes: 1, AuthToken: "s3cret", ExtraArgs: []string{"--redis-enable-flush"}})
	ctx := ctxT(t)

	r := dialRaw(t, c.RedisAddr(0))
	r.send("GET k\r\nAUTH wrong\r\nAUTH default s3cret\r\nSET k v\r\n")
	if v := r.reply(); v.Type != '-' || !strings.HasPrefix(v.Str, "NOAUTH") {
		t.Errorf("GET before AUTH = %v, want NOAUTH", v)
	}
	if v := r.reply(); v.Type != '-' || !strings.HasPrefix(v.Str, "WRONGPASS") {
		t.Errorf("AUTH wrong = %v, want WRONGPASS", v)
	}
	if v := r.reply(); v.Str != "OK" {
		t.Errorf("AUTH right = %v", v)
	}
	if v := r.reply(); v.Str != "OK" {
		t.Errorf("SET after AUTH = %v", v)
	}

	bad := client(t, c, 0, func(o *redis.Options) { o.Password = "nope" })
	if err := bad.Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Errorf("go-redis with a wrong password: %v", err)
	}
	good := client(t, c, 0, func(o *redis.Options) { o.Password = "s3cret" })
	if v := must(good.Get(ctx, "k").Result())(t, "GET with password"); v != "v" {
		t.Errorf("GET = %q", v)
	}
	for i := range 20 {
		must(good.Set(ctx, fmt.Sprintf("f:%d", i), "v", 0).Result())(t, "SET")
	}
	must(good.FlushDB(ctx).Result())(t, "FLUSHDB")
	if n := must(good.DBSize(ctx).Result())(t, "DBSIZE"); n != 0 {
		t.Errorf("DBSIZE after FLUSHDB = %d", n)
	}
}
