package redisapi

import (
	"bufio"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestClientNameBounded protects the bound on connection names over a
// real socket: CLIENT SETNAME and HELLO SETNAME refuse a name over 256
// bytes and keep the name set before (before: any length, printed by
// every CLIENT LIST), a name of 256 bytes is taken, and names with spaces
// or control characters are still refused.
func TestClientNameBounded(t *testing.T) {
	s := New(&fakeKV{counters: map[string]int64{}}, Config{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(lis)
	t.Cleanup(func() { s.Close(time.Second) })
	nc, err := net.Dial("tcp", lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	ok, long := strings.Repeat("n", 256), strings.Repeat("n", 257)
	if _, err := io.WriteString(nc, encode("CLIENT SETNAME "+ok, "CLIENT SETNAME "+long, "HELLO 2 SETNAME "+long,
		"CLIENT SETNAME a\x01b", "CLIENT GETNAME")); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(nc)
	for _, want := range []string{"+OK", "-ERR Client names cannot be longer than 256 bytes",
		"-ERR Client names cannot be longer than 256 bytes", "-ERR Client names cannot contain spaces"} {
		if line, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(line, want) {
			t.Fatalf("answered %q, %v; want %q", line, err, want)
		}
	}
	if line, _ := r.ReadString('\n'); line != "$256\r\n" {
		t.Fatalf("GETNAME after the refused names answered %q, want the 256-byte name", line)
	}
}

// TestClientSetInfo: CLIENT SETINFO takes lib-name and lib-ver (any case)
// and shows them in CLIENT INFO; an unknown attribute, a value with a space
// or a control byte, and a value over 256 bytes are refused with Redis
// 7.2's texts (the bound is Concord's) and change nothing. Before, every
// SETINFO answered OK and CLIENT INFO always showed them empty.
func TestClientSetInfo(t *testing.T) {
	c := serveOnSocket(t, New(&fakeKV{counters: map[string]int64{}}, Config{}))
	c.send(encode("CLIENT SETINFO lib-name go-redis", "CLIENT SETINFO LIB-VER 9.7.0", "CLIENT SETINFO foo x",
		"CLIENT SETINFO Lib-Name a\x01b", "CLIENT SETINFO lib-name "+strings.Repeat("n", 257), "CLIENT INFO"))
	for _, want := range []string{"OK", "OK", "ERR Unrecognized option 'foo'",
		"ERR Lib-Name cannot contain spaces, newlines or special characters.", "ERR lib-name cannot be longer than 256 bytes"} {
		if v := c.reply(); v.Str != want {
			t.Fatalf("answered %+v, want %q", v, want)
		}
	}
	if v := c.reply(); !strings.Contains(v.Str, " lib-name=go-redis lib-ver=9.7.0") {
		t.Fatalf("CLIENT INFO = %q, want lib-name=go-redis lib-ver=9.7.0", v.Str)
	}
}

// TestHelloRefusedAuthenticatesNothing: a HELLO with the right token but a
// bad option or name after it is refused and leaves the connection
// unauthenticated (before, AUTH logged in as it was read: the connection
// was logged in by a command answered with an error, as Redis 7.0 does);
// a wrong AUTH is answered first, as in Redis 7.0.
func TestHelloRefusedAuthenticatesNothing(t *testing.T) {
	c := serveOnSocket(t, New(&fakeKV{counters: map[string]int64{}}, Config{AuthToken: "s3cret"}))
	c.send(encode("HELLO 2 AUTH default s3cret FOO", "GET k", "HELLO 2 AUTH default s3cret SETNAME a\x01b", "GET k",
		"HELLO 2 AUTH nobody s3cret FOO", "GET k", "HELLO 2 AUTH default s3cret SETNAME me", "CLIENT GETNAME"))
	for i, want := range []string{"ERR Syntax error in HELLO option 'FOO'", "NOAUTH", "ERR Client names cannot contain spaces",
		"NOAUTH", "WRONGPASS", "NOAUTH"} {
		if v := c.reply(); !strings.HasPrefix(v.Str, want) {
			t.Fatalf("reply %d = %+v, want %q", i, v, want)
		}
	}
	if v := c.reply(); v.Type != '*' && v.Type != '%' {
		t.Fatalf("HELLO with the token = %+v, want its map", v)
	}
	if v := c.reply(); v.Str != "me" {
		t.Fatalf("CLIENT GETNAME = %+v, want me", v)
	}
}

// TestClientListShowsMulti: CLIENT LIST shows a connection inside MULTI as
// Redis does, flag x and multi= the commands it queued, and flags=N
// multi=-1 once EXEC, DISCARD or RESET ended the transaction. Before, every
// connection showed flags=N multi=-1, in MULTI or not.
func TestClientListShowsMulti(t *testing.T) {
	s := New(&fakeKV{counters: map[string]int64{}}, Config{})
	a := serveOnSocket(t, s)
	nc, err := net.DialTimeout("tcp", s.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(30 * time.Second))
	b := &sockClient{t: t, nc: nc, br: bufio.NewReader(nc)}

	a.send(encode("CLIENT ID"))
	id := a.reply().Int
	// seen is a's line in CLIENT LIST, asked by b once a answered.
	seen := func() string {
		b.send(encode("CLIENT LIST ID " + strconv.FormatInt(id, 10)))
		return b.reply().Str
	}
	for _, step := range []struct {
		cmds []string
		want string
	}{
		{nil, " flags=N db=0 sub=0 psub=0 ssub=0 multi=-1 "},
		{[]string{"MULTI"}, " flags=x db=0 sub=0 psub=0 ssub=0 multi=0 "},
		{[]string{"SET k v", "GET k"}, " flags=x db=0 sub=0 psub=0 ssub=0 multi=2 "},
		{[]string{"EXEC"}, " flags=N db=0 sub=0 psub=0 ssub=0 multi=-1 "},
		{[]string{"MULTI", "SET k v"}, " multi=1 "},
		{[]string{"DISCARD"}, " flags=N db=0 sub=0 psub=0 ssub=0 multi=-1 "},
		{[]string{"MULTI", "SET k v"}, " multi=1 "},
		{[]string{"RESET"}, " flags=N db=0 sub=0 psub=0 ssub=0 multi=-1 "},
	} {
		for _, cmd := range step.cmds {
			a.send(encode(cmd))
			a.reply()
		}
		if line := seen(); !strings.Contains(line, step.want) {
			t.Fatalf("after %q, CLIENT LIST shows %q, want %q", step.cmds, line, step.want)
		}
	}
}
