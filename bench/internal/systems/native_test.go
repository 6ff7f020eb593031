package systems

import (
	"strings"
	"testing"
)

// Trimmed from a real run of etcd's benchmark v3.6.8 with --precise.
const etcdOut = `
Summary:
  Total:	2.0001 secs.
  Slowest:	0.0213 secs.
  Fastest:	0.0006 secs.
  Average:	0.0014 secs.
  Stddev:	0.0009 secs.
  Requests/sec:	726.4126

Response time histogram:
  0.0006 [1]	|
  0.0027 [1400]	|∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎

Latency distribution:
  10.00% in 0.0009 secs.
  25.00% in 0.0010 secs.
  50.00% in 0.0013 secs.
  75.00% in 0.0016 secs.
  90.00% in 0.0018 secs.
  95.00% in 0.0021 secs.
  99.00% in 0.0033 secs.
  99.90% in 0.0068 secs.
`

func TestParseEtcdBenchmark(t *testing.T) {
	r, err := ParseEtcdBenchmark(strings.NewReader(etcdOut))
	if err != nil {
		t.Fatal(err)
	}
	if r.OpsPerSec != 726.4126 || r.P50 != 1.3 || r.P99 != 3.3 {
		t.Errorf("parsed %+v", r)
	}
	if _, err := ParseEtcdBenchmark(strings.NewReader("Error: context deadline exceeded\n")); err == nil {
		t.Error("an error message parsed as a result")
	}
}

func TestParseRedisBenchmark(t *testing.T) {
	out := `"test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
"SET","3602.31","0.274","0.096","0.247","0.399","0.575","198.655"
"GET","10309.28","0.092","0.032","0.087","0.119","0.343","9.703"
`
	m, err := ParseRedisBenchmark(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	if s := m["SET"]; s.OpsPerSec != 3602.31 || s.P50 != 0.247 || s.P99 != 0.575 {
		t.Errorf("SET %+v", s)
	}
	if g := m["GET"]; g.OpsPerSec != 10309.28 || g.P99 != 0.343 {
		t.Errorf("GET %+v", g)
	}
	if _, err := ParseRedisBenchmark(strings.NewReader(`"test","rps"` + "\n")); err == nil {
		t.Error("a header without rows parsed")
	}
}
