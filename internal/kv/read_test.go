package kv

import (
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/concord-kv/concord/internal/keys"
	"github.com/concord-kv/concord/internal/storage"
	"github.com/concord-kv/concord/internal/storepb"
)

func scanKeys(t *testing.T, r pebble.Reader, start, end string, limit int) []string {
	t.Helper()
	var e []byte
	if end != "" {
		e = []byte(end)
	}
	kvs, _, err := Scan(r, shard, []byte(start), e, Page{Limit: limit}, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, kv := range kvs {
		if string(kv.GetValue()) != "v-"+string(kv.GetKey()) {
			t.Fatalf("Scan pairs key %q with value %q", kv.GetKey(), kv.GetValue())
		}
		out = append(out, string(kv.GetKey()))
	}
	return out
}

// seed stores user keys of shard, each with value "v-<key>", plus keys of
// the neighbouring shards and the shard's own non-user records.
func seed(t *testing.T, db *pebble.DB, ks ...string) {
	t.Helper()
	b := db.NewBatch()
	defer b.Close()
	for _, k := range ks {
		for _, s := range []uint64{shard - 1, shard, shard + 1} {
			if err := b.Set(keys.User(s, []byte(k)), encodeValue([]byte("v-"+k), 0), nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	_ = b.Set(keys.Session(shard, 1), []byte("session"), nil)
	_ = storage.SetProto(b, keys.Applied(shard), &storepb.AppliedState{Index: 1, Term: 1}) // a state record, never a user key
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
}

// TestScanBoundsAndOrder protects Scan's [start, end) bounds, byte order,
// limit, open end, and its confinement to the shard's user keys.
func TestScanBoundsAndOrder(t *testing.T) {
	f := newFixture(t)
	seed(t, f.db, "d", "b", "a", "c", "c\x00", "\xff", "")
	for _, tc := range []struct {
		start, end string
		limit      int
		want       []string
	}{
		{"", "", 100, []string{"", "a", "b", "c", "c\x00", "d", "\xff"}},
		{"b", "d", 100, []string{"b", "c", "c\x00"}},
		{"b", "c\x00", 100, []string{"b", "c"}},
		{"bb", "", 100, []string{"c", "c\x00", "d", "\xff"}},
		{"a", "", 2, []string{"a", "b"}},
		{"a", "", 0, nil},
		{"e", "f", 10, nil},
	} {
		if got := scanKeys(t, f.db, tc.start, tc.end, tc.limit); !slices.Equal(got, tc.want) {
			t.Fatalf("Scan(%q, %q, %d) = %q, want %q", tc.start, tc.end, tc.limit, got, tc.want)
		}
	}
}

// TestGetAndScanOverSnapshot protects reads over any pebble.Reader: a
// snapshot keeps answering as of when it was taken.
func TestGetAndScanOverSnapshot(t *testing.T) {
	f := newFixture(t)
	seed(t, f.db, "a", "b")
	snap := f.db.NewSnapshot()
	defer snap.Close()
	f.kv(0, 0, 1, put("a", "new"), del("b"), put("c", "v-c"))
	if v, _, found, err := Get(snap, shard, []byte("a"), 0); err != nil || !found || string(v) != "v-a" {
		t.Fatalf("Get over snapshot = %q, %v, %v; want the old value", v, found, err)
	}
	if got := scanKeys(t, snap, "", "", 10); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("Scan over snapshot = %q", got)
	}
	f.value("a", []byte("new"))
	f.value("b", nil)
}
