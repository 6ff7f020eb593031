package redisapi

import (
	"io"
	"testing"
	"time"
)

// replyWithin is how long these tests wait for a reply: a reply that does
// not come in that time is one the server holds.
const replyWithin = 3 * time.Second

// TestCommandThenBlankLineAnswered: a command followed by a blank line
// (CRLF, LF, a line of spaces) or by whitespace of a line not yet ended is
// answered at once, on a plain socket and through the port mux, and the
// connection then serves the next command, answered alone. Before, the
// server read the blank line as part of the pipeline, skipped it, and
// waited for the next command with the replies unwritten: the client got
// nothing until it sent another command (Redis skips empty inline lines
// and answers at once).
func TestCommandThenBlankLineAnswered(t *testing.T) {
	cases := []struct{ name, send, want string }{
		{"SET then CRLF", "SET blank1 x\r\n\r\n", "+OK\r\n"},
		{"CRLF", "PING\r\n\r\n", "+PONG\r\n"},
		{"LF", "PING\r\n\n", "+PONG\r\n"},
		{"LF LF", "PING\n\n", "+PONG\r\n"},
		{"spaces line", "PING\r\n   \r\n", "+PONG\r\n"},
		{"multibulk then CRLF", "*1\r\n$4\r\nPING\r\n\r\n", "+PONG\r\n"},
		{"several blank lines", "PING\r\n\r\n\n \t\r\n", "+PONG\r\n"},
		{"lone CR", "PING\r\n\r", "+PONG\r\n"},
		{"spaces, line not ended", "PING\r\n   ", "+PONG\r\n"},
		{"two commands, blank lines after", "PING\r\nPING\r\n\r\n\r\n", "+PONG\r\n+PONG\r\n"},
		// Answered at once before too.
		{"no blank line", "PING\r\n", "+PONG\r\n"},
		{"blank line first", "\r\nPING\r\n", "+PONG\r\n"},
		{"blank line between", "PING\r\n\r\nPING\r\n", "+PONG\r\n+PONG\r\n"},
		{"empty multibulk after", "PING\r\n*0\r\n", "+PONG\r\n"},
	}
	for _, how := range []string{"plain", "mux"} {
		for _, tc := range cases {
			t.Run(how+"/"+tc.name, func(t *testing.T) {
				s := New(&fakeKV{counters: map[string]int64{}}, Config{})
				nc := dialFirstCmd(t, s, how)
				_ = nc.SetDeadline(time.Now().Add(replyWithin))
				if _, err := nc.Write([]byte(tc.send)); err != nil {
					t.Fatal(err)
				}
				got := make([]byte, len(tc.want))
				if n, err := io.ReadFull(nc, got); err != nil {
					t.Fatalf("%q: read %q, then %v: the reply held back", tc.send, got[:n], err)
				}
				if string(got) != tc.want {
					t.Fatalf("%q: answered %q, want %q", tc.send, got, tc.want)
				}
				_ = nc.SetDeadline(time.Now().Add(replyWithin))
				if _, err := nc.Write([]byte("PING\r\n")); err != nil {
					t.Fatal(err)
				}
				next := make([]byte, len("+PONG\r\n"))
				if n, err := io.ReadFull(nc, next); err != nil || string(next) != "+PONG\r\n" {
					t.Fatalf("%q, then PING: read %q, %v; want +PONG alone", tc.send, next[:n], err)
				}
			})
		}
	}
}
