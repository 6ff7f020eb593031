package redisapi

import (
	"bufio"
	"io"
	"net"
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
