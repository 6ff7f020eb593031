package backupfile

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

// FuzzScan reads arbitrary bytes as a backup file, as Verify and Read do
// (scanReader, on the bytes in memory rather than in a file), twice: as
// they are, and with their SHA-256 appended, so that inputs whose frames
// and counts hold get past the digest and reach the accepting path.
// Properties:
//   - no panic; an answer, an error or a summary;
//   - what the scan allocates is bounded by the input's size, not by the
//     lengths it announces (a hostile file says 8 MiB and holds 8 bytes);
//   - the scan that hands out records (Read's second pass) accepts what
//     Verify accepts and nothing else; it hands out as many records as the
//     summary counts, in the shards the summary lists, and what they hold,
//     written again by a Writer, verifies to the same summary.
func FuzzScan(f *testing.F) {
	for _, seed := range fuzzSeeds(f) {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkScan(t, data)
		digested := sha256.Sum256(data)
		checkScan(t, append(bytes.Clone(data), digested[:]...))
	})
}

// fuzzSeeds are small valid files (two shards, one of them empty, and
// one of a single record) and their bodies without the digest, which the
// target appends. Small: the fuzzer minimizes every input that finds new
// code, up to a minute each, in proportion to its size.
func fuzzSeeds(t testing.TB) [][]byte {
	var seeds [][]byte
	for _, path := range []string{smallFile(t), hostileFile(t, 3, 5)} {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		seeds = append(seeds, b, b[:len(b)-sha256.Size])
	}
	// A record that announces the largest value and holds 4 bytes of it.
	hostile := bytes.Clone(seeds[len(seeds)-1])
	at := bytes.IndexByte(hostile[headerLen:], frameRecord) + headerLen
	hostile = append(hostile[:at+1+1+3], binary.AppendUvarint(nil, MaxValueBytes)...) // after the 3-byte key hostileFile wrote
	hostile = append(hostile, "vvvv"...)
	return append(seeds, hostile, []byte(Magic), []byte("not a backup"))
}

// smallFile writes a backup of two shards: one record with an expiry and
// one without in the first, none in the second.
func smallFile(t testing.TB) string {
	path := filepath.Join(t.TempDir(), "small.bak")
	w, err := Create(path, Header{ClusterID: 42, Created: time.UnixMilli(1_700_000_000_000)})
	must(t, err)
	must(t, w.BeginShard(Shard{ID: 1, EndHash: 99, AppliedIndex: 7}))
	must(t, w.Add(Record{Key: []byte("k"), Value: []byte("v"), ExpireAtMs: 1_800_000_000_000}))
	must(t, w.Add(Record{Key: []byte("k2")}))
	must(t, w.EndShard())
	must(t, w.BeginShard(Shard{ID: 2, StartHash: 100, EndHash: ^uint64(0), AppliedIndex: 9}))
	must(t, w.EndShard())
	_, err = w.Close()
	must(t, err)
	return path
}

// checkScan scans data, counting what it allocates, and checks the
// result.
func checkScan(t *testing.T, data []byte) {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	sum, err := scanReader(bytes.NewReader(data), int64(len(data)), nil)
	runtime.ReadMemStats(&after)
	// The 1 MiB read buffer, then at most a few times the input: each
	// length is checked against the bytes left before anything is read.
	if n, limit := after.TotalAlloc-before.TotalAlloc, uint64(2<<20+16*len(data)); n > limit {
		t.Fatalf("scanning %d bytes allocated %d bytes (limit %d)", len(data), n, limit)
	}
	var handed []Shard
	_, errRead := scanReader(bytes.NewReader(data), int64(len(data)), func(s Shard, r Record) error {
		handed = append(handed, s)
		return nil
	})
	if err != nil {
		if errRead == nil {
			t.Fatalf("Verify refuses the file (%v), a scan handing out records accepts it", err)
		}
		return
	}
	if errRead != nil {
		t.Fatalf("Verify accepts the file, a scan handing out records refuses it: %v", errRead)
	}
	checkSummary(t, sum, handed)
	checkRewrite(t, sum, data)
}

// checkSummary: the records handed out are those the summary counts, shard
// by shard, in the summary's order.
func checkSummary(t *testing.T, sum Summary, handed []Shard) {
	if uint64(len(handed)) != sum.Records {
		t.Fatalf("%d records handed out, the summary counts %d", len(handed), sum.Records)
	}
	var total uint64
	i := 0
	for _, s := range sum.Shards {
		total += s.Records
		for range s.Records {
			if handed[i].ID != s.ID || handed[i].AppliedIndex != s.AppliedIndex {
				t.Fatalf("record %d handed out in shard %+v, the summary's shard is %+v", i, handed[i], s)
			}
			i++
		}
	}
	if total != sum.Records || len(sum.Digest) != sha256.Size {
		t.Fatalf("summary counts %d records, its shards %d; digest %x", sum.Records, total, sum.Digest)
	}
}

// checkRewrite writes what an accepted file holds with a Writer: it must
// verify to the same summary (the bytes may differ: a length's uvarint
// need not be minimal in an accepted file).
func checkRewrite(t *testing.T, sum Summary, data []byte) {
	path := filepath.Join(t.TempDir(), "again.bak")
	w, err := Create(path, sum.Header)
	if err != nil {
		t.Fatal(err)
	}
	open := false
	_, err = scanReader(bytes.NewReader(data), int64(len(data)), func(s Shard, r Record) error {
		if s.Records == 0 { // a shard's first record: s.Records counts those before it
			if open {
				must(t, w.EndShard())
			}
			must(t, w.BeginShard(s))
			open = true
		}
		return w.Add(r)
	})
	must(t, err)
	if open {
		must(t, w.EndShard())
	}
	if _, err := w.Close(); err != nil {
		t.Fatal(err)
	}
	again, err := Verify(path)
	must(t, err)
	if !sameShards(again, sum) {
		t.Fatalf("written again, the file holds %+v; it held %+v", again, sum)
	}
}

// sameShards compares summaries but for their digests and the shards of no
// records (which a rewrite from the records alone cannot see).
func sameShards(a, b Summary) bool {
	nonEmpty := func(s []Shard) []Shard {
		var out []Shard
		for _, x := range s {
			if x.Records > 0 {
				out = append(out, x)
			}
		}
		return out
	}
	x, y := nonEmpty(a.Shards), nonEmpty(b.Shards)
	if a.Records != b.Records || a.Version != b.Version || a.ClusterID != b.ClusterID ||
		!a.Created.Equal(b.Created) || len(x) != len(y) {
		return false
	}
	for i := range x {
		if x[i] != y[i] {
			return false
		}
	}
	return true
}
