package kv

import (
	"fmt"
	"testing"
)

// TestLoadThenExport protects backup and restore at the state machine: keys
// loaded as a restore does read back as applied PUTs (value, expiry, the
// sweep's index), and Export returns every live key exactly once, in
// chunks, leaving out expired ones.
func TestLoadThenExport(t *testing.T) {
	f := newFixture(t)
	const now = int64(1_700_000_000_000)
	b := f.db.NewBatch()
	want := map[string]int64{}
	for i := range 100 {
		k, exp := fmt.Sprintf("k%03d", i), int64(0)
		switch i % 4 {
		case 1:
			exp = now + 60_000 // live
		case 2:
			exp = now - 1 // expired at now
		}
		if err := Load(b, shard, []byte(k), []byte("v"+k), exp); err != nil {
			t.Fatal(err)
		}
		if exp == 0 || exp > now {
			want[k] = exp
		}
	}
	if err := b.Commit(nil); err != nil {
		t.Fatal(err)
	}
	if n := f.indexEntries(); n != 50 {
		t.Fatalf("%d expiry index entries, want 50", n)
	}
	if v, at, found, err := Get(f.db, shard, []byte("k001"), now); err != nil || !found || string(v) != "vk001" || at != now+60_000 {
		t.Fatalf("Get k001 = %q %d %v %v", v, at, found, err)
	}
	if exp, _ := Expired(f.db, shard, now, 1000); len(exp) != 25 {
		t.Fatalf("%d keys expired by now, want 25", len(exp))
	}
	got := map[string]int64{}
	var start []byte
	chunks := 0
	for {
		recs, more, err := Export(f.db, shard, start, 50, now)
		if err != nil {
			t.Fatal(err)
		}
		chunks++
		for _, r := range recs {
			if _, dup := got[string(r.Key)]; dup {
				t.Fatalf("%s exported twice", r.Key)
			}
			if string(r.Value) != "v"+string(r.Key) {
				t.Fatalf("%s = %q", r.Key, r.Value)
			}
			got[string(r.Key)] = r.ExpireAtUnixMs
		}
		if !more {
			break
		}
		start = append(append([]byte(nil), recs[len(recs)-1].Key...), 0)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("exported %v\nwant %v", got, want)
	}
	if chunks < 5 {
		t.Fatalf("%d chunks of at most ~50 bytes for 75 keys", chunks)
	}
}
