package storage

import (
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

func cacheEntry(index, term uint64, data string) *pb.Entry {
	return &pb.Entry{Index: new(index), Term: new(term), Data: []byte(data)}
}

func cacheIndexes(c *entryCache) []uint64 {
	var out []uint64
	for _, e := range c.ents {
		out = append(out, e.GetIndex())
	}
	return out
}

// TestEntryCacheOverwriteAndEvict protects the cache's two invariants:
// entries stay contiguous through truncate-on-conflict appends, and the
// byte bound evicts the oldest entries first but never the newest.
func TestEntryCacheOverwriteAndEvict(t *testing.T) {
	one := proto.Size(cacheEntry(1, 1, "xxxx"))
	c := entryCache{maxBytes: 3 * one}
	c.append([]*pb.Entry{cacheEntry(1, 1, "xxxx"), cacheEntry(2, 1, "xxxx"), cacheEntry(3, 1, "xxxx")})
	c.append([]*pb.Entry{cacheEntry(2, 2, "yyyy")}) // conflict at 2 drops 2 and 3
	if got := cacheIndexes(&c); len(got) != 2 || got[0] != 1 || got[1] != 2 {
		t.Fatalf("after overwrite at 2: cache holds %v, want [1 2]", got)
	}
	if term, ok := c.term(2); !ok || term != 2 {
		t.Fatalf("term(2) = %d, %v; want the overwriting entry's term 2", term, ok)
	}
	c.append([]*pb.Entry{cacheEntry(3, 2, "zzzz"), cacheEntry(4, 2, "zzzz")})
	if got := cacheIndexes(&c); len(got) != 3 || got[0] != 2 {
		t.Fatalf("byte bound of 3 entries: cache holds %v, want [2 3 4]", got)
	}
	big := cacheEntry(5, 2, string(make([]byte, 10*one)))
	c.append([]*pb.Entry{big})
	if got := cacheIndexes(&c); len(got) != 1 || got[0] != 5 {
		t.Fatalf("an oversized newest entry must be kept alone: cache holds %v", got)
	}
	c.append([]*pb.Entry{cacheEntry(9, 2, "gap")})
	if got := cacheIndexes(&c); len(got) != 1 || got[0] != 9 {
		t.Fatalf("a non-contiguous append must restart the cache: holds %v", got)
	}
}

// TestEntryCacheGet protects the lookup bounds, the maxSize rule (at least
// one entry) and that callers cannot corrupt the cache through the result.
func TestEntryCacheGet(t *testing.T) {
	c := entryCache{maxBytes: 1 << 20}
	c.append([]*pb.Entry{cacheEntry(5, 1, "a"), cacheEntry(6, 1, "b"), cacheEntry(7, 1, "c")})
	if _, ok := c.get(4, 6, 1<<20); ok {
		t.Fatal("get below the cache must miss")
	}
	if _, ok := c.get(6, 9, 1<<20); ok {
		t.Fatal("get beyond the cache must miss")
	}
	got, ok := c.get(5, 8, 0)
	if !ok || len(got) != 1 || got[0].GetIndex() != 5 {
		t.Fatalf("maxSize 0 must still return one entry, got %v", got)
	}
	got, _ = c.get(5, 8, 1<<20)
	got[0] = cacheEntry(5, 9, "corrupt")
	if again, _ := c.get(5, 6, 1<<20); again[0].GetTerm() != 1 {
		t.Fatal("changing a returned slice changed the cache")
	}
	c.dropTo(6)
	if got := cacheIndexes(&c); len(got) != 1 || got[0] != 7 {
		t.Fatalf("dropTo(6) left %v, want [7]", got)
	}
}
