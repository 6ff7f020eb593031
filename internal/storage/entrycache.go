package storage

import (
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// entryCache keeps the most recently appended log entries of a replica in
// memory: raft reads them back right after writing them (to send them to
// followers and to apply them once committed), and serving those reads from
// memory saves a Pebble iterator per read.
//
// Invariant: ents holds contiguous entries ending at the log's last index,
// and size is the sum of their proto sizes, kept under maxBytes (but the
// newest entry is always kept, whatever its size).
type entryCache struct {
	ents     []*pb.Entry
	size     int
	maxBytes int
}

func (c *entryCache) first() uint64 {
	if len(c.ents) == 0 {
		return 0
	}
	return c.ents[0].GetIndex()
}

// append adds entries that follow or overwrite the cached ones.
func (c *entryCache) append(ents []*pb.Entry) {
	if len(ents) == 0 {
		return
	}
	first := ents[0].GetIndex()
	switch {
	case len(c.ents) == 0:
	case first < c.first() || first > c.ents[len(c.ents)-1].GetIndex()+1:
		c.clear() // not contiguous with the cache: start over
	default:
		c.dropFrom(first) // truncate-on-conflict, as the log does
	}
	for _, e := range ents {
		c.ents = append(c.ents, e)
		c.size += proto.Size(e)
	}
	for len(c.ents) > 1 && c.size > c.maxBytes {
		c.size -= proto.Size(c.ents[0])
		c.ents[0] = nil
		c.ents = c.ents[1:]
	}
}

// dropFrom removes cached entries at index i and above.
func (c *entryCache) dropFrom(i uint64) {
	for len(c.ents) > 0 && c.ents[len(c.ents)-1].GetIndex() >= i {
		c.size -= proto.Size(c.ents[len(c.ents)-1])
		c.ents = c.ents[:len(c.ents)-1]
	}
}

// dropTo removes cached entries at index i and below.
func (c *entryCache) dropTo(i uint64) {
	for len(c.ents) > 0 && c.ents[0].GetIndex() <= i {
		c.size -= proto.Size(c.ents[0])
		c.ents[0] = nil
		c.ents = c.ents[1:]
	}
}

func (c *entryCache) clear() { c.ents, c.size = nil, 0 }

// get returns entries [lo, hi) limited to maxSize bytes beyond the first, if
// the cache holds all of [lo, hi). The slice is a copy (raft owns what
// Entries returns and may append to it); the entries themselves are shared,
// which raft's Storage contract allows since no one mutates them.
func (c *entryCache) get(lo, hi, maxSize uint64) ([]*pb.Entry, bool) {
	if len(c.ents) == 0 || lo < c.first() || hi > c.ents[len(c.ents)-1].GetIndex()+1 || lo >= hi {
		return nil, false
	}
	a, b := int(lo-c.first()), int(hi-c.first())
	var size uint64
	for i := a; i < b; i++ {
		size += uint64(proto.Size(c.ents[i]))
		if i > a && size > maxSize {
			b = i
			break
		}
	}
	return append([]*pb.Entry(nil), c.ents[a:b]...), true
}

// term returns the term of entry i, if cached.
func (c *entryCache) term(i uint64) (uint64, bool) {
	if len(c.ents) == 0 || i < c.first() || i > c.ents[len(c.ents)-1].GetIndex() {
		return 0, false
	}
	return c.ents[i-c.first()].GetTerm(), true
}
