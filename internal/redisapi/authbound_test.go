package redisapi

import (
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// TestUnauthenticatedInputBounded: with a token, a connection that has not
// given it may send only small commands, as Redis allows an unauthenticated
// client (at most 10 arguments, 16 KiB each): a larger header is refused at
// once, with Redis's words, and the connection closed, before its bytes
// arrive. Before, such a connection could make the node buffer a 16 MiB
// command and an 8 MiB pipeline of them, to answer each with NOAUTH. Once
// AUTH passes (in the same write as a large command) the node's own limits
// apply; RESET, which forgets the AUTH, brings the small ones back.
func TestUnauthenticatedInputBounded(t *testing.T) {
	big := strings.Repeat("v", 100<<10)
	for _, tc := range []struct {
		name, send, want string
	}{
		{"bulk", "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$102400\r\n", "-ERR Protocol error: unauthenticated bulk length"},
		{"multibulk", "*11\r\n", "-ERR Protocol error: unauthenticated multibulk length"},
		{"after RESET", "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$102400\r\n", "-ERR Protocol error: unauthenticated bulk length"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := serveOnSocket(t, New(&fakeKV{counters: map[string]int64{}}, Config{AuthToken: "s3cret", MaxValueBytes: 1 << 20}))
			_ = c.nc.SetDeadline(time.Now().Add(5 * time.Second))
			if tc.name == "after RESET" {
				c.send(encode("AUTH s3cret", "RESET"))
				if v := c.reply(); v.Str != "OK" {
					t.Fatalf("AUTH: %v", v)
				}
				if v := c.reply(); v.Str != "RESET" {
					t.Fatalf("RESET: %v", v)
				}
			}
			c.send(tc.send)
			line, err := c.br.ReadString('\n')
			if err != nil || !strings.HasPrefix(line, tc.want) {
				t.Fatalf("answered %q, %v; want %q at once", line, err, tc.want)
			}
			var ne net.Error
			if _, err := io.Copy(io.Discard, c.br); errors.As(err, &ne) && ne.Timeout() {
				t.Fatal("the connection was not closed")
			}
		})
	}
	t.Run("after AUTH", func(t *testing.T) {
		f := &fakeKV{counters: map[string]int64{}}
		c := serveOnSocket(t, New(f, Config{AuthToken: "s3cret", MaxValueBytes: 1 << 20}))
		c.send(encode("AUTH s3cret", "SET k "+big, "PING"))
		for _, want := range []string{"OK", "OK", "PONG"} {
			if v := c.reply(); v.Str != want {
				t.Fatalf("answered %.40q, want %q", v.Str, want)
			}
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		if len(f.log) != 1 || f.log[0] != "batch k" {
			t.Fatalf("the backend saw %q, want the SET of the large value", f.log)
		}
	})
}
