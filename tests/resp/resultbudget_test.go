package resp

import (
	"bufio"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/concord-kv/concord/internal/testcluster"
	"github.com/concord-kv/concord/internal/version"
)

// TestTransactionPastTheResultBudget shows what a Redis user sees when a
// transaction's values exceed what one batch may return (63 MiB,
// kv.MaxResultBytes): EXEC sends its queue as one raft entry, so before
// the budget nine GETs of an 8 MiB value made every replica build 72 MiB
// of results. Now the GETs whose values still fit answer them; the ones
// past the budget answer "ERR reply too large" and the rest of the
// transaction (a SET, a GETDEL past the budget that must not delete)
// behaves as it did.
func TestTransactionPastTheResultBudget(t *testing.T) {
	t.Parallel()
	const valueBytes = 8<<20 - 64 // and its key: within a batch's 8 MiB
	c := startCluster(t, testcluster.Options{Nodes: 1, HTTP: true,
		ExtraArgs: []string{"--max-value-bytes=" + strconv.Itoa(8<<20)}})
	ctx := ctxT(t)
	rc := client(t, c, 0)
	// The leader bounds results only once the cluster's version allows it.
	testcluster.WaitFor(t, readyTimeout, func() error {
		if v, err := metricGauge(c.HTTPAddr(0), "concord_cluster_version"); err != nil || v < int(version.ResultBudget) {
			return fmt.Errorf("cluster version %d (%v), want %d or above", v, err, version.ResultBudget)
		}
		return nil
	})
	keys := keysInOneShard(t, c, "budget:", 2)
	big, other := keys[0], keys[1]
	value := strings.Repeat("v", valueBytes)
	must(rc.Set(ctx, big, value, 0).Result())(t, "SET big")

	var gets []*redis.StringCmd
	var set *redis.StatusCmd
	var getdel *redis.StringCmd
	_, err := rc.TxPipelined(ctx, func(p redis.Pipeliner) error {
		set = p.Set(ctx, other, "x", 0)
		for range 9 {
			gets = append(gets, p.Get(ctx, big))
		}
		getdel = p.GetDel(ctx, big)
		return nil
	})
	if err == nil {
		t.Fatal("EXEC of 10 values of 8 MiB answered no error")
	}
	const tooLarge = "ERR reply too large"
	for i, g := range gets {
		v, err := g.Result()
		switch {
		case i < 7 && (err != nil || len(v) != valueBytes): // 7 × 8 MiB fit in 63 MiB
			t.Fatalf("GET %d: %d bytes, %v; want the value", i, len(v), err)
		case i >= 7:
			wantErr(t, fmt.Sprint("GET ", i), err, tooLarge)
		}
	}
	wantErr(t, "GETDEL past the budget", getdel.Err(), tooLarge)
	if s, err := set.Result(); err != nil || s != "OK" {
		t.Fatalf("SET in the transaction: %q, %v", s, err)
	}
	if n := must(rc.StrLen(ctx, big).Result())(t, "STRLEN"); n != valueBytes {
		t.Fatalf("the GETDEL past the budget left %d bytes, want the value kept", n)
	}
	if v := must(rc.Get(ctx, other).Result())(t, "GET other"); v != "x" {
		t.Fatalf("GET other = %q, want x", v)
	}
}

// metricGauge reads an unlabelled metric from the node's /metrics at addr.
func metricGauge(addr, name string) (int, error) {
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + addr + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			return int(f), err
		}
	}
	return 0, fmt.Errorf("%s not on %s/metrics", name, addr)
}
