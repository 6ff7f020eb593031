package redisapi

import (
	"context"
	"crypto/rand"
	"strconv"
	"strings"

	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/kv"
	"github.com/concord-kv/concord/internal/resp"
)

// Keyspace commands page through the KV service's Scan, which merges every
// shard's keys in byte order.

const (
	scanDefaultCount = 10
	scanMaxCount     = 10000
	// countCap bounds the keys DBSIZE counts and flushCap those FLUSHDB
	// deletes per call: each is a walk of the whole keyspace.
	countCap = 10_000_000
	// keysScanCap bounds the keys KEYS looks at, matching or not.
	keysScanCap = 1_000_000
)

// scan reads a page of keys from start: at most limit keys, ending early
// after the key that brings them to maxBytes.
func (c *conn) scan(ctx context.Context, start []byte, limit, maxBytes int) (*concordpb.ScanResponse, error) {
	if _, ok := c.shardOf(ctx, start); !ok { // a starting node: wait as key commands do
		return nil, errNoShards
	}
	// Keys only: no keyspace command answers with values, and a walk of
	// the keys would otherwise read, copy and drop every value.
	r, err := c.s.b.Scan(ctx, &concordpb.ScanRequest{Header: c.header(), Start: start, Limit: uint32(limit), KeysOnly: true,
		MaxBytes: uint32(maxBytes)})
	if err != nil {
		return nil, fromStatus(err, false)
	}
	return r, nil
}

// scanPageBytes bounds the keys of one page of a keyspace walk: half the
// output buffer limit, so that a SCAN page and its framing fit in it with
// room to spare (a page may pass its bound by a key per shard). With the
// scan's own bound (64 MiB) a SCAN of long keys passed the limit, and the
// connection was closed with no answer.
func (c *conn) scanPageBytes() int {
	return max(1, min(c.s.cfg.OutputBufferLimit/2, kv.MaxReadBytes))
}

// parseCursor reads a cursor as Redis's strtoul does: an empty one is 0
// and a '+' may lead.
func parseCursor(b []byte) (uint64, error) {
	if len(b) == 0 {
		return 0, nil
	}
	if b[0] == '+' {
		b = b[1:]
	}
	return strconv.ParseUint(string(b), 10, 64)
}

// cmdScan: SCAN cursor [MATCH pattern] [COUNT n] [TYPE t]. The cursor is an
// id in the node's cursor table for the key the next page starts at; 0
// starts and ends a scan. Every key present for the whole scan is returned
// once (keys come in byte order).
func cmdScan(c *conn, a [][]byte, w *resp.Writer) {
	cur, err := parseCursor(a[1])
	if err != nil {
		w.Error("ERR invalid cursor")
		return
	}
	var match *globber
	// Every key is a string: no TYPE, or TYPE string in any case, keeps
	// them all; any other TYPE, "" too, none (as Redis compares it).
	count, typ := scanDefaultCount, "string"
	for i := 2; i < len(a); i += 2 {
		if i+1 >= len(a) {
			w.Error(string(errSyntax))
			return
		}
		switch strings.ToUpper(string(a[i])) {
		case "MATCH":
			if match, err = newGlobber(a[i+1], c.clientGone); err != nil {
				w.Error(err.Error())
				return
			}
		case "COUNT":
			n, err := parseInt(a[i+1])
			switch {
			case err != nil:
				w.Error(err.Error())
				return
			case n < 1:
				w.Error(string(errSyntax))
				return
			}
			count = int(min(n, scanMaxCount))
		case "TYPE":
			typ = strings.ToLower(string(a[i+1]))
		default:
			w.Error(string(errSyntax))
			return
		}
	}
	var start []byte
	if cur != 0 {
		var ok bool
		if start, ok = c.s.cursors.get(cur); !ok {
			w.Error("ERR invalid cursor (unknown or expired on this node; SCAN cursors are per node)")
			return
		}
	}
	ctx, cancel := context.WithTimeout(c.s.ctx, c.s.cfg.CommandTimeout)
	defer cancel()
	r, err := c.scan(ctx, start, count, c.scanPageBytes())
	if err != nil {
		w.Error(err.Error())
		return
	}
	next := uint64(0)
	if r.GetMore() {
		next = c.s.cursors.put(r.GetNextStart())
	}
	var keys [][]byte
	for _, kv := range r.GetKvs() {
		if typ != "string" {
			break
		}
		if ctx.Err() != nil { // the command's time is up, or the server closes
			w.Error(fromStatus(status.FromContextError(ctx.Err()).Err(), false).Error())
			return
		}
		ok := true
		if match != nil {
			if ok, err = match.match(kv.GetKey()); err != nil {
				w.Error(err.Error())
				return
			}
		}
		if ok {
			keys = append(keys, kv.GetKey())
		}
	}
	w.Array(2)
	w.BulkString(strconv.FormatUint(next, 10))
	w.Array(len(keys))
	for _, k := range keys {
		w.Bulk(k)
	}
}

// cmdKeys returns every key matching the pattern, up to KeysLimit: past
// it, an error (use SCAN). It looks at no more than keysScanCap keys.
func cmdKeys(c *conn, a [][]byte, w *resp.Writer) {
	limit := c.s.cfg.KeysLimit
	match, err := newGlobber(a[1], c.clientGone)
	if err != nil {
		w.Error(err.Error())
		return
	}
	var out [][]byte
	size := 0 // out's reply, in bytes
	err = c.walk(keysScanCap, func(kv *concordpb.KeyValue) error {
		ok, err := match.match(kv.GetKey())
		if err != nil {
			return err
		}
		if ok {
			if len(out) == limit {
				return replyError("ERR KEYS matches more than " + strconv.Itoa(limit) + " keys; use SCAN")
			}
			if size += bulkBytes(kv.GetKey()); size > c.s.cfg.OutputBufferLimit {
				return replyError("ERR KEYS matches more than " + strconv.Itoa(c.s.cfg.OutputBufferLimit) +
					" bytes of keys, the output buffer limit; use SCAN")
			}
			out = append(out, kv.GetKey())
		}
		return nil
	})
	if err != nil {
		w.Error(err.Error())
		return
	}
	w.Array(len(out))
	for _, k := range out {
		w.Bulk(k)
	}
}

// bulkBytes is the size of b's bulk string reply ($<len>\r\n<b>\r\n).
// KEYS adds them up to stop before a reply past the output buffer limit:
// 10,000 keys of 64 KiB were 640 MiB, held before the connection was
// closed for it.
func bulkBytes(b []byte) int {
	return len(b) + len(strconv.Itoa(len(b))) + 5
}

// walk calls f for every key in order, at most cap keys (then an error).
// Between pages it stops if the client has left.
func (c *conn) walk(cap int, f func(*concordpb.KeyValue) error) error {
	var start []byte
	seen := 0
	for {
		if start != nil && c.clientGone() {
			return errClientGone
		}
		ctx, cancel := context.WithTimeout(c.s.ctx, c.s.cfg.CommandTimeout)
		r, err := c.scan(ctx, start, 1000, c.scanPageBytes())
		cancel()
		if err != nil {
			return err
		}
		for _, kv := range r.GetKvs() {
			if err := c.s.ctx.Err(); err != nil { // the server closes: stop between keys
				return fromStatus(status.FromContextError(err).Err(), false)
			}
			if seen++; seen > cap {
				return replyError("ERR the keyspace holds more than " + strconv.Itoa(cap) + " keys, more than this command walks")
			}
			if err := f(kv); err != nil {
				return err
			}
		}
		if !r.GetMore() {
			return nil
		}
		start = r.GetNextStart()
	}
}

// cmdDBSize counts the keys: a walk of the whole keyspace (Concord keeps no
// count), so it costs as much as a SCAN to the end.
func cmdDBSize(c *conn, _ [][]byte, w *resp.Writer) {
	n := int64(0)
	err := c.walk(countCap, func(*concordpb.KeyValue) error { n++; return nil })
	if err != nil {
		w.Error(err.Error())
		return
	}
	w.Int(n)
}

// cmdRandomKey returns the first key at or after a random point of the key
// space (wrapping around): random, though not uniformly.
func cmdRandomKey(c *conn, _ [][]byte, w *resp.Writer) {
	start := make([]byte, 8)
	_, _ = rand.Read(start)
	ctx, cancel := context.WithTimeout(c.s.ctx, c.s.cfg.CommandTimeout)
	defer cancel()
	for _, s := range [][]byte{start, nil} {
		r, err := c.scan(ctx, s, 1, c.scanPageBytes())
		if err != nil {
			w.Error(err.Error())
			return
		}
		if len(r.GetKvs()) > 0 {
			w.Bulk(r.GetKvs()[0].GetKey())
			return
		}
	}
	w.Null()
}

// flushPageBytes bounds the keys of one page FLUSHDB deletes, so that each
// shard's part of the page, deleted as one batch, stays within a batch's
// 8 MiB (a shard's part of a page is at most its share of the bound and
// one key more). Pages of the scan's own bound (1,000 keys of 64 KiB in
// one shard: 64 MiB) were refused as too large, and FLUSHDB failed.
const flushPageBytes = 4 << 20

// cmdFlush: FLUSHDB and FLUSHALL [ASYNC|SYNC], only with
// --redis-enable-flush. It deletes page by page, one batch per shard per
// page: not atomic, and a key written meanwhile may survive.
func cmdFlush(c *conn, a [][]byte, w *resp.Writer) {
	name := strings.ToUpper(string(a[0]))
	if !c.s.cfg.EnableFlush {
		w.Error("ERR " + name + " is disabled on this node; start it with --redis-enable-flush to allow it")
		return
	}
	if len(a) > 2 || (len(a) == 2 && !strings.EqualFold(string(a[1]), "async") && !strings.EqualFold(string(a[1]), "sync")) {
		w.Error(string(errSyntax))
		return
	}
	for {
		ctx, cancel := context.WithTimeout(c.s.ctx, c.s.cfg.CommandTimeout)
		r, err := c.scan(ctx, nil, 1000, flushPageBytes)
		if err == nil && len(r.GetKvs()) > 0 {
			ops := make([]*concordpb.Op, len(r.GetKvs()))
			for i, kv := range r.GetKvs() {
				ops[i] = &concordpb.Op{Type: concordpb.OpType_OP_DELETE, Key: kv.GetKey()}
			}
			_, err = c.batches(ctx, ops, false)
		}
		cancel()
		if err != nil {
			w.Error(fromStatus(err, true).Error())
			return
		}
		if len(r.GetKvs()) == 0 {
			w.SimpleString("OK")
			return
		}
	}
}

// Bounds on glob matching (SCAN MATCH, KEYS, CONFIG GET). The matcher
// backtracks only to the last star, so one key costs at most
// len(pattern)·len(key) steps; but a 64 KiB pattern against a 4 KiB key
// is 0.5 s, and SCAN COUNT 10000 with a 1 MiB pattern was hours, run on
// after the client left. A pattern is at most maxPatternBytes, and one
// command's matching at most maxMatchSteps steps (about a quarter of a
// second on an idle core; 2^28 took longer than the command timeout
// under make test's load); past either the command fails, with nothing
// matched.
const (
	maxPatternBytes = 64 << 10
	maxMatchSteps   = 1 << 26
)

// goneCheckSteps is how many matching steps (about 4 ms) pass between two
// looks at whether the client is still there.
const goneCheckSteps = 1 << 20

// errClientGone ends a command whose client has left: nobody reads its
// reply, and a walk of the keyspace or a long match would run on for it.
const errClientGone = replyError("ERR client disconnected")

const (
	errPatternTooLong    = replyError("ERR pattern is longer than 65536 bytes")
	errPatternTooComplex = replyError("ERR pattern too complex: matching it took more than 2^26 steps; use a simpler pattern or a smaller COUNT")
)

// globber matches keys against one command's pattern within the
// command's step budget.
type globber struct {
	pattern []byte
	left    int // steps left
	// gone, when set, says whether the client has left; asked between
	// keys once goneCheckSteps have passed since checked (left then).
	gone    func() bool
	checked int
}

// newGlobber checks pattern's length and returns its matcher; gone (nil:
// never) says whether the command's client has left.
func newGlobber(pattern []byte, gone func() bool) (*globber, error) {
	if len(pattern) > maxPatternBytes {
		return nil, errPatternTooLong
	}
	return &globber{pattern: pattern, left: maxMatchSteps, gone: gone, checked: maxMatchSteps}, nil
}

// match reports whether s matches the pattern; it fails once the
// command's matching has taken maxMatchSteps, or its client has left.
func (g *globber) match(s []byte) (bool, error) {
	ok := globMatchSteps(g.pattern, s, &g.left)
	if g.left < 0 {
		return false, errPatternTooComplex
	}
	if g.gone != nil && g.checked-g.left >= goneCheckSteps {
		g.checked = g.left
		if g.gone() {
			return false, errClientGone
		}
	}
	return ok, nil
}

// globMatch reports whether s matches pattern with Redis's glob rules,
// without a step budget: for short subjects only (CONFIG GET's names).
func globMatch(p, s []byte) bool {
	left := int(^uint(0) >> 1)
	return globMatchSteps(p, s, &left)
}

// globMatchSteps reports whether s matches pattern with Redis's glob
// rules: * ? [abc] [^a] [a-z] and \ escapes. It backtracks only to the
// last star, so its time is at most len(p)·len(s), whatever the pattern;
// each step is taken from *left, and it gives up (false) once *left is
// below zero.
func globMatchSteps(p, s []byte, left *int) bool {
	pi, si := 0, 0
	starP, starS := -1, 0
	for si < len(s) {
		if *left--; *left < 0 {
			return false
		}
		if pi < len(p) && step(p, &pi, s[si], left) {
			si++
			continue
		}
		if pi < len(p) && p[pi] == '*' {
			starP, starS = pi, si
			pi++
			if pi == len(p) {
				return true // a final star matches whatever is left
			}
			continue
		}
		if starP < 0 {
			return false
		}
		pi, starS = starP+1, starS+1
		si = starS
	}
	for pi < len(p) && p[pi] == '*' {
		pi++
	}
	return pi == len(p)
}

// step matches one byte c against the pattern element at p[*pi] (not a
// star) and advances *pi past it on a match. A class costs *left a step
// per byte of it: a 64 KiB class is looked through for every byte it is
// tried on.
func step(p []byte, pi *int, c byte, left *int) bool {
	switch p[*pi] {
	case '*':
		return false
	case '?':
		*pi++
		return true
	case '[':
		rest, ok := matchClass(p[*pi+1:], c)
		*left -= len(p) - *pi - len(rest)
		if ok {
			*pi = len(p) - len(rest)
		}
		return ok
	}
	want, n := p[*pi], 1
	if want == '\\' && *pi+1 < len(p) {
		want, n = p[*pi+1], 2
	}
	if want != c {
		return false
	}
	*pi += n
	return true
}

// matchClass matches c against the class starting after '[' and returns
// the pattern after the closing ']'.
func matchClass(p []byte, c byte) ([]byte, bool) {
	not := len(p) > 0 && p[0] == '^'
	if not {
		p = p[1:]
	}
	match := false
	for len(p) > 0 && p[0] != ']' {
		switch {
		case p[0] == '\\' && len(p) > 1:
			match = match || p[1] == c
			p = p[2:]
		case len(p) > 2 && p[1] == '-':
			// Any third byte ends the range, ']' too, as in Redis's
			// stringmatchlen: "[a-]" is the range ']'..'a', unclosed.
			lo, hi := p[0], p[2]
			if lo > hi {
				lo, hi = hi, lo
			}
			match = match || (c >= lo && c <= hi)
			p = p[3:]
		default:
			match = match || p[0] == c
			p = p[1:]
		}
	}
	if len(p) > 0 {
		p = p[1:] // the ']'
	}
	return p, match != not
}
