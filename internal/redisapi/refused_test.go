package redisapi

import (
	"os"
	"strings"
	"testing"
)

// refusedAnswers are commands and subcommands Redis has and Concord does
// not, with Concord's answer: Redis 7.0's own text for an unknown command
// or subcommand (the name as the client wrote it), so a client library
// that recognises those errors reads these as it reads Redis's.
var refusedAnswers = []struct{ cmd, want string }{
	{"CLIENT KILL 127.0.0.1:1", "ERR unknown subcommand 'KILL'. Try CLIENT HELP."},
	{"client kill ID 1", "ERR unknown subcommand 'kill'. Try CLIENT HELP."},
	{"CLIENT REPLY OFF", "ERR unknown subcommand 'REPLY'. Try CLIENT HELP."},
	{"CLIENT TRACKING on", "ERR unknown subcommand 'TRACKING'. Try CLIENT HELP."},
	{"CLIENT NO-EVICT on", "ERR unknown subcommand 'NO-EVICT'. Try CLIENT HELP."},
	{"OBJECT ENCODING k", "ERR unknown command 'OBJECT', with args beginning with: 'ENCODING' 'k' "},
	{"SWAPDB 0 1", "ERR unknown command 'SWAPDB', with args beginning with: '0' '1' "},
	{"MOVE k 1", "ERR unknown command 'MOVE', with args beginning with: 'k' '1' "},
	{"COPY k k2", "ERR unknown command 'COPY', with args beginning with: 'k' 'k2' "},
}

// TestRefusedCommandsAnswered: each refused command gets Redis's error
// text over a real socket, changes nothing in the store (MOVE and COPY
// would write), leaves the connection serving, and is listed in
// docs/redis.md's table of refused commands, so the docs say what a
// client will meet.
func TestRefusedCommandsAnswered(t *testing.T) {
	f := &fakeKV{counters: map[string]int64{}}
	c := serveOnSocket(t, New(f, Config{MaxValueBytes: 1 << 20}))
	for _, r := range refusedAnswers {
		c.send(encode(r.cmd))
		if v := c.reply(); v.Type != '-' || v.Str != r.want {
			t.Errorf("%s: answered %v, want (error) %s", r.cmd, v, r.want)
		}
	}
	c.send(encode("PING"))
	if v := c.reply(); v.Str != "PONG" {
		t.Fatalf("PING after the refused commands: %v", v)
	}
	f.mu.Lock()
	log := f.log
	f.mu.Unlock()
	if len(log) != 0 {
		t.Errorf("refused commands reached the store: %q", log)
	}

	table := refusedTable(t)
	for _, r := range refusedAnswers {
		words := strings.Fields(strings.ToUpper(r.cmd))
		name := "`" + words[0] + "`"
		if words[0] == "CLIENT" {
			name = "`CLIENT " + words[1] + "`"
		}
		if !strings.Contains(table, name) {
			t.Errorf("docs/redis.md's refused table does not list %s", name)
		}
	}
}

// refusedTable returns the table under "Refused, with why:" in
// docs/redis.md.
func refusedTable(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../docs/redis.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	start := strings.Index(doc, "Refused, with why:")
	if start < 0 {
		t.Fatal(`docs/redis.md has no "Refused, with why:" table`)
	}
	end := strings.Index(doc[start:], "\n\n|")
	rest := doc[start:]
	if end >= 0 {
		rest = rest[end+2:] // the table itself, after the heading line
	}
	if stop := strings.Index(rest, "\n\n"); stop >= 0 {
		rest = rest[:stop]
	}
	return rest
}
