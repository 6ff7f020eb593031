package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func testRNG() *rand.Rand { return rand.New(rand.NewPCG(7, 11)) }

func TestMixHonoured(t *testing.T) {
	for _, w := range []string{"a", "b", "c", "d", "e", "f", "put", "get"} {
		mix, err := MixOf(w)
		if err != nil {
			t.Fatal(err)
		}
		rng := testRNG()
		const n = 200_000
		var got [numOps]int
		for range n {
			got[mix.pick(rng)]++
		}
		// 200k Bernoulli draws: one standard deviation is at most 0.0011.
		for op := range numOps {
			if f := float64(got[op]) / n; f < mix[op]-0.006 || f > mix[op]+0.006 {
				t.Errorf("workload %s, %s: drew %v, want %v", w, opNames[op], f, mix[op])
			}
		}
	}
}

func TestWorkloadMixes(t *testing.T) {
	want := map[string]string{
		"a": `{"read":0.5,"update":0.5}`, "b": `{"read":0.95,"update":0.05}`, "c": `{"read":1}`,
		"d": `{"read":0.95,"insert":0.05}`, "e": `{"insert":0.05,"scan":0.95}`,
		"f": `{"read":0.5,"rmw":0.5}`, "put": `{"update":1}`, "get": `{"read":1}`,
	}
	for w, js := range want {
		m, err := MixOf(w)
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := m.MarshalJSON(); string(got) != js {
			t.Errorf("workload %s: mix %s, want %s", w, got, js)
		}
	}
	if _, err := MixOf("g"); err == nil {
		t.Error("workload g accepted")
	}
	if d := DefaultDistribution("d"); d != "latest" {
		t.Errorf("workload d reads %s keys, want latest", d)
	}
}

func TestLatestFavoursNewestKeys(t *testing.T) {
	ks := newKeyspace(1000)
	ch, err := newChooser("latest", ks)
	if err != nil {
		t.Fatal(err)
	}
	pick := ch.bind(testRNG())
	for range 500 {
		ks.insert()
	}
	newest := 0
	const n = 20_000
	for range n {
		k := pick()
		if k < 0 || k >= 1500 {
			t.Fatalf("latest picked %d outside [0, 1500)", k)
		}
		if k >= 1400 {
			newest++
		}
	}
	// Zipf(1.1) over recency puts well over half the draws on the 100 newest keys.
	if f := float64(newest) / n; f < 0.5 {
		t.Errorf("latest: only %.2f of draws on the 100 newest keys", f)
	}
}

// counts draws n keys from dist over keys keys and returns per-key counts.
func counts(t *testing.T, dist string, keys, n int) []int {
	t.Helper()
	ch, err := newChooser(dist, newKeyspace(keys))
	if err != nil {
		t.Fatal(err)
	}
	pick := ch.bind(testRNG())
	c := make([]int, keys)
	for range n {
		k := pick()
		if k < 0 || k >= keys {
			t.Fatalf("%s picked key %d outside [0, %d)", dist, k, keys)
		}
		c[k]++
	}
	return c
}

// topShare is the fraction of draws that hit the most drawn frac of keys.
func topShare(c []int, frac float64, n int) float64 {
	s := append([]int(nil), c...)
	sort.Sort(sort.Reverse(sort.IntSlice(s)))
	sum := 0
	for _, v := range s[:int(float64(len(s))*frac)] {
		sum += v
	}
	return float64(sum) / float64(n)
}

func TestHotKeyPutsNinetyPercentOnTenPercent(t *testing.T) {
	const keys, n = 1000, 200_000
	c := counts(t, "hotkey", keys, n)
	if share := topShare(c, 0.10, n); share < 0.88 || share > 0.92 {
		t.Errorf("top 10%% of keys got %.3f of requests, want ~0.90", share)
	}
	// The cold keys are still reached: the other 10% spreads over them.
	cold := 0
	for _, v := range c[100:] {
		if v > 0 {
			cold++
		}
	}
	if cold < 850 {
		t.Errorf("only %d of 900 cold keys were drawn", cold)
	}
}

func TestUniformIsFlatAndZipfianIsSkewed(t *testing.T) {
	const keys, n = 1000, 200_000
	if share := topShare(counts(t, "uniform", keys, n), 0.10, n); share > 0.13 {
		t.Errorf("uniform: top 10%% of keys got %.3f of requests", share)
	}
	z := counts(t, "zipfian", keys, n)
	if share := topShare(z, 0.10, n); share < 0.5 {
		t.Errorf("zipfian: top 10%% of keys got only %.3f of requests", share)
	}
	if z[0] < z[1] || z[1] < z[10] {
		t.Errorf("zipfian: key 0 should be the most popular: %d, %d, %d", z[0], z[1], z[10])
	}
	if _, err := newChooser("gaussian", newKeyspace(10)); err == nil {
		t.Error("unknown distribution accepted")
	}
}

func TestKeyFormatting(t *testing.T) {
	for _, tc := range []struct {
		i, size int
		want    string
	}{{0, 16, "k000000000000000"}, {42, 16, "k000000000000042"}, {9999, 5, "k9999"}, {7, 2, "k7"}} {
		if got := KeyName(tc.i, tc.size); got != tc.want || len(got) != tc.size {
			t.Errorf("KeyName(%d, %d) = %q, want %q", tc.i, tc.size, got, tc.want)
		}
	}
	// Every key of a space has the configured size and a distinct name.
	seen := map[string]bool{}
	for i := range 10000 {
		k := KeyName(i, 16)
		if len(k) != 16 || seen[k] {
			t.Fatalf("key %d: %q (len %d, dup %v)", i, k, len(k), seen[k])
		}
		seen[k] = true
	}
}

func TestValuesArePrintableAndSized(t *testing.T) {
	rng := testRNG()
	p := newValuePool(256, rng)
	a, b := p.next(rng), p.next(rng)
	if len(a) != 256 || len(b) != 256 {
		t.Fatalf("value sizes %d, %d", len(a), len(b))
	}
	for _, c := range a {
		if !strings.ContainsRune(printable, rune(c)) {
			t.Fatalf("unprintable byte %q", c)
		}
	}
	// A full-capacity slice would let an append scribble on the pool.
	if cap(a) != 256 {
		t.Errorf("cap %d, want 256", cap(a))
	}
}

func validConfig() Config {
	return Config{Target: "concord", Endpoints: []string{"x:1"}, Workload: "a", ReadRatio: 0.5,
		Distribution: "uniform", Keys: 100, KeySize: 16, ValueSize: 8, Clients: 4, Conns: 1,
		Ops: 1000, Consistency: "linearizable", Seed: 1}
}

func TestValidate(t *testing.T) {
	c := validConfig()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	bad := map[string]func(*Config){
		"target":       func(c *Config) { c.Target = "cassandra" },
		"redis scan":   func(c *Config) { c.Target, c.Workload = "redis", "e" },
		"workload":     func(c *Config) { c.Workload = "g" },
		"short keys":   func(c *Config) { c.Keys, c.KeySize = 1000, 3 }, // "k999" needs 4
		"ratio":        func(c *Config) { c.Workload, c.ReadRatio = "custom", 1.5 },
		"no limit":     func(c *Config) { c.Ops, c.Duration = 0, 0 },
		"consistency":  func(c *Config) { c.Consistency = "eventual" },
		"distribution": func(c *Config) { c.Distribution = "normal" },
		"clients":      func(c *Config) { c.Clients = MaxClients + 1 },
		"idle conns":   func(c *Config) { c.Conns = c.Clients + 1 },
	}
	for name, mut := range bad {
		c := validConfig()
		mut(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	for _, target := range []string{"etcd", "redis"} {
		c = validConfig()
		c.Target = target
		if err := c.Validate(); err != nil {
			t.Errorf("target %s: %v", target, err)
		}
	}
}

// fakeTarget is an in-memory Target that fails every failEvery-th put.
type fakeTarget struct {
	mu        sync.Mutex
	m         map[string]string
	puts      atomic.Int64
	failEvery int64
}

func newFake() *fakeTarget { return &fakeTarget{m: map[string]string{}} }

func (f *fakeTarget) Get(ctx context.Context, key []byte) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.m[string(key)]
	return ok, nil
}

func (f *fakeTarget) Put(ctx context.Context, key, value []byte) error {
	if n := f.puts.Add(1); f.failEvery > 0 && n%f.failEvery == 0 {
		return status.Error(codes.Unavailable, "injected")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.m[string(key)] = string(value)
	return nil
}

// Scan counts the stored keys at or after start, up to n.
func (f *fakeTarget) Scan(ctx context.Context, start []byte, n int) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := 0
	for k := range f.m {
		if k >= string(start) {
			c++
		}
	}
	return min(c, n), nil
}

func (f *fakeTarget) Close() error { return nil }

func TestRunCountsOpsAndPreloads(t *testing.T) {
	cfg := validConfig()
	cfg.Preload = true
	f := newFake()
	res, err := Run(context.Background(), cfg, []Target{f, f}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.m) != cfg.Keys {
		t.Errorf("preload stored %d keys, want %d", len(f.m), cfg.Keys)
	}
	if res.Ops != cfg.Ops || res.Errors != 0 {
		t.Errorf("ops %d errors %d, want %d and 0", res.Ops, res.Errors, cfg.Ops)
	}
	rd, up := res.ByOp["read"], res.ByOp["update"]
	if rd.Ops+up.Ops != res.Ops || rd.Ops < 400 || up.Ops < 400 {
		t.Errorf("read %d + update %d != %d or not ~50/50", rd.Ops, up.Ops, res.Ops)
	}
	if rd.NotFound != 0 {
		t.Errorf("%d reads found nothing after preload", rd.NotFound)
	}
}

func TestRunCountsErrorsByKind(t *testing.T) {
	cfg := validConfig()
	cfg.ReadRatio, cfg.Workload = 0, "put"
	f := newFake()
	f.failEvery = 10
	res, err := Run(context.Background(), cfg, []Target{f}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Errors != 100 || res.ErrorsByKind["Unavailable"] != 100 || res.Ops != 900 {
		t.Errorf("errors %d by kind %v ops %d, want 100 Unavailable and 900 ops", res.Errors, res.ErrorsByKind, res.Ops)
	}
	if _, ok := res.ByOp["read"]; ok {
		t.Error("a put-only run reports reads")
	}
}

func TestRunStopsAtDuration(t *testing.T) {
	cfg := validConfig()
	cfg.Ops, cfg.Duration = 0, 200*time.Millisecond
	start := time.Now()
	res, err := Run(context.Background(), cfg, []Target{newFake()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > 2*time.Second || res.DurationSec < 0.2 || res.Ops == 0 {
		t.Errorf("ran %v, duration_sec %v, ops %d", el, res.DurationSec, res.Ops)
	}
}

func TestErrorKind(t *testing.T) {
	for err, want := range map[error]string{
		status.Error(codes.Unavailable, "x"):                                  "Unavailable",
		context.DeadlineExceeded:                                              "DeadlineExceeded",
		errors.Join(errors.New("wrapped"), status.Error(codes.NotFound, "y")): "NotFound",
	} {
		if got := ErrorKind(err); got != want {
			t.Errorf("ErrorKind(%v) = %s, want %s", err, got, want)
		}
	}
}

// TestJSONShape checks the field names scripts and docs rely on.
func TestJSONShape(t *testing.T) {
	cfg := validConfig()
	cfg.Preload = true
	res, err := Run(context.Background(), cfg, []Target{newFake()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := res.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"throughput_ops_per_sec", "latency_ms", "ops", "errors", "errors_by_kind", "duration_sec", "config", "by_op", "timeline"} {
		if _, ok := m[k]; !ok {
			t.Errorf("missing %q", k)
		}
	}
	lat, _ := m["latency_ms"].(map[string]any)
	for _, k := range []string{"p50", "p90", "p99", "p999", "max"} {
		if _, ok := lat[k].(float64); !ok {
			t.Errorf("latency_ms.%s missing or not a number: %v", k, lat[k])
		}
	}
	if lat["p50"].(float64) > lat["p99"].(float64) || lat["p99"].(float64) > lat["max"].(float64) {
		t.Errorf("percentiles out of order: %v", lat)
	}
	if m["ops"].(float64) != 1000 {
		t.Errorf("ops = %v", m["ops"])
	}
	byOp, _ := m["by_op"].(map[string]any)
	for _, op := range []string{"read", "update"} {
		st, _ := byOp[op].(map[string]any)
		if _, ok := st["latency_ms"].(map[string]any)["p99"]; !ok {
			t.Errorf("by_op.%s has no latency_ms.p99: %v", op, st)
		}
	}
	// The CDF rises from the fastest to the slowest operation.
	var pts []CDFPoint
	raw, _ := json.Marshal(m["latency_cdf"])
	if err := json.Unmarshal(raw, &pts); err != nil || len(pts) < 100 {
		t.Fatalf("latency_cdf: %v, %d points", err, len(pts))
	}
	for i := 1; i < len(pts); i++ {
		if pts[i].Percent <= pts[i-1].Percent || pts[i].Ms < pts[i-1].Ms {
			t.Fatalf("latency_cdf not monotonic at %d: %v then %v", i, pts[i-1], pts[i])
		}
	}
	if last := pts[len(pts)-1]; last.Percent != 100 || last.Ms != lat["max"].(float64) {
		t.Errorf("latency_cdf ends at %v, want 100%% at max %v", last, lat["max"])
	}
	conf, _ := m["config"].(map[string]any)
	if mix, _ := conf["mix"].(map[string]any); mix["read"] != 0.5 || mix["update"] != 0.5 {
		t.Errorf("config.mix = %v", conf["mix"])
	}
	if conf["workload"] != "a" || conf["clients"].(float64) != 4 {
		t.Errorf("config not echoed: %v", conf)
	}
}

func TestTextAndPlot(t *testing.T) {
	cfg := validConfig()
	res, err := Run(context.Background(), cfg, []Target{newFake()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var txt bytes.Buffer
	if err := res.WriteText(&txt); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"throughput", "p99.9", "read", "update"} {
		if !strings.Contains(txt.String(), want) {
			t.Errorf("text report lacks %q:\n%s", want, txt.String())
		}
	}
	var svg bytes.Buffer
	if err := res.WritePlot(&svg); err != nil {
		t.Fatal(err)
	}
	// The SVG must be well-formed XML with one curve per op type plus "all".
	d := xml.NewDecoder(&svg)
	lines := 0
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("malformed SVG: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "polyline" {
			lines++
		}
	}
	if lines != 4 { // all, read, update, throughput
		t.Errorf("%d polylines, want 4", lines)
	}
}

func TestProgressLine(t *testing.T) {
	cfg := validConfig()
	cfg.Ops, cfg.Duration = 0, 1200*time.Millisecond
	var out syncBuffer
	res, err := Run(context.Background(), cfg, []Target{newFake()}, &out)
	if err != nil {
		t.Fatal(err)
	}
	s := out.String()
	// Two redraws at least (0.5 s and 1.0 s), each rewriting the line in place.
	if strings.Count(s, "\r\033[K") < 2 || !strings.Contains(s, "ops/s") || !strings.HasSuffix(s, "\n") {
		t.Errorf("progress output %q", s)
	}
	if len(res.Timeline) < 2 {
		t.Errorf("timeline has %d samples", len(res.Timeline))
	}
}

// syncBuffer is a bytes.Buffer safe for the sampler goroutine and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestRunInsertsScansAndReadModifyWrites(t *testing.T) {
	for _, w := range []string{"d", "e", "f"} {
		cfg := validConfig()
		cfg.Workload, cfg.Distribution, cfg.Preload = w, "", true
		f := newFake()
		res, err := Run(context.Background(), cfg, []Target{f}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if res.Ops != cfg.Ops || res.Errors != 0 {
			t.Fatalf("workload %s: ops %d errors %d", w, res.Ops, res.Errors)
		}
		var sum int64
		for _, st := range res.ByOp {
			sum += st.Ops
		}
		if sum != res.Ops {
			t.Errorf("workload %s: per-op counts %v do not add up to %d", w, res.ByOp, res.Ops)
		}
		switch w {
		case "d", "e":
			// Every insert added a key past the preloaded ones.
			if ins := res.ByOp["insert"].Ops; ins < 20 || len(f.m) != cfg.Keys+int(ins) {
				t.Errorf("workload %s: %d inserts but %d keys stored (preloaded %d)", w, ins, len(f.m), cfg.Keys)
			}
		case "f":
			if rmw := res.ByOp["rmw"]; rmw.Ops < 400 || rmw.NotFound != 0 {
				t.Errorf("workload f: rmw %+v", rmw)
			}
		}
		if w == "e" && res.ByOp["scan"].Ops < 900 {
			t.Errorf("workload e: only %d scans", res.ByOp["scan"].Ops)
		}
	}
}

// TestPreloadErrorShortensKey: a preload put that fails names its key by
// its start and length, not the whole --key-size of it (the node's own
// message, "key is 100000 bytes; the limit is 4096", was lost at the end
// of a 100 KB line).
func TestPreloadErrorShortensKey(t *testing.T) {
	cfg := validConfig()
	cfg.KeySize, cfg.Preload = 100000, true
	f := newFake()
	f.failEvery = 1
	_, err := Run(context.Background(), cfg, []Target{f}, nil)
	if err == nil || len(err.Error()) > 200 || !strings.Contains(err.Error(), "(100000 bytes)") {
		t.Fatalf("preload error (%d bytes): %.300s; want the key shortened, with its length", len(err.Error()), err)
	}
}
