package redisapi

import (
	"bytes"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a log destination the server writes while the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestHTTPRequestClosed: a command named POST or Host: (in any case,
// inline or multibulk) closes the connection, unanswered, and nothing
// after it runs, as Redis does against cross-protocol attacks; the
// commands before it are answered. The server logs a warning, at most
// once a minute. Before, an HTTP request sent to a RESP port got errors
// for its lines and the connection stayed open, and a POST's body ran as
// commands.
func TestHTTPRequestClosed(t *testing.T) {
	cases := []struct{ name, send, want string }{
		{"GET", "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", "-ERR wrong number of arguments for 'get' command\r\n"},
		{"POST with a body", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\n\r\nSET k v\r\n", ""},
		{"lower case", "PING\r\nhost: x\r\nSET k v\r\n", "+PONG\r\n"},
		{"multibulk", "*2\r\n$5\r\nHOST:\r\n$1\r\nx\r\n*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n", ""},
		{"alone", "post\r\n", ""},
	}
	for _, how := range []string{"plain", "mux"} {
		logs := &syncBuffer{}
		f := &fakeKV{counters: map[string]int64{}}
		s := New(f, Config{Logger: slog.New(slog.NewTextHandler(logs, nil))})
		firstConn := dialFirstCmd(t, s, how) // serves s until the test ends
		for i, tc := range cases {
			t.Run(how+"/"+tc.name, func(t *testing.T) {
				nc := firstConn
				if i > 0 {
					nc = dialRESP(t, s) // the same server: one warning for all
				}
				_ = nc.SetDeadline(time.Now().Add(replyWithin))
				if _, err := nc.Write([]byte(tc.send)); err != nil {
					t.Fatal(err)
				}
				got, err := io.ReadAll(nc)
				// Closed with bytes of the request still unread (through
				// the mux, whose first read takes 24 bytes): a reset.
				if err != nil && !(isReset(err) && tc.want == "") {
					t.Fatalf("%q: read %q, then %v; want the connection closed", tc.send, got, err)
				}
				if string(got) != tc.want {
					t.Fatalf("%q: answered %q, want %q then the end", tc.send, got, tc.want)
				}
			})
		}
		pollUntil(t, "the connections closed", func() bool { return s.Clients() == 0 })
		f.mu.Lock()
		ran := f.log
		f.mu.Unlock()
		if len(ran) != 0 {
			t.Errorf("%s: the backend ran %q after a POST or Host:", how, ran)
		}
		if n := strings.Count(logs.String(), "cross-protocol"); n != 1 {
			t.Errorf("%s: %d warnings logged for %d connections, want 1 (once a minute): %s", how, n, len(cases), logs)
		}
	}
}
