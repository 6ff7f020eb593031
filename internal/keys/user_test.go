package keys

import (
	"bytes"
	"testing"
)

// TestUserKey protects the layout of a user key's storage key (a shard's
// prefix, "su", the key), which every stored value is found by, and its
// single allocation on the read path.
func TestUserKey(t *testing.T) {
	for _, c := range []struct {
		shard uint64
		key   string
	}{{0, ""}, {7, "k"}, {1 << 40, "a longer key\x00with a zero"}} {
		want := append(append(shardPrefix(c.shard), 's', 'u'), c.key...)
		if got := User(c.shard, []byte(c.key)); !bytes.Equal(got, want) {
			t.Fatalf("User(%d, %q) = %x, want %x", c.shard, c.key, got, want)
		}
		if got := UserKey(c.shard, User(c.shard, []byte(c.key))); string(got) != c.key {
			t.Fatalf("UserKey(User(%d, %q)) = %q", c.shard, c.key, got)
		}
	}
	key := []byte("some user key")
	if n := testing.AllocsPerRun(100, func() { userSink = User(7, key) }); n != 1 {
		t.Fatalf("User makes %v allocations, want 1", n)
	}
}

// userSink makes User's result escape, as a stored or looked-up key does.
var userSink []byte
