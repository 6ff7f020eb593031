package main

import (
	"strings"
	"testing"
)

// TestRoundOrderAlternates protects -rounds' fairness: odd rounds run the
// systems as given, even rounds reversed.
func TestRoundOrderAlternates(t *testing.T) {
	s := []string{"etcd", "redis-everysec", "concord"}
	if got := strings.Join(roundOrder(s, 1), ","); got != "etcd,redis-everysec,concord" {
		t.Fatalf("round 1: %s", got)
	}
	if got := strings.Join(roundOrder(s, 2), ","); got != "concord,redis-everysec,etcd" {
		t.Fatalf("round 2: %s", got)
	}
	if got := strings.Join(s, ","); got != "etcd,redis-everysec,concord" {
		t.Fatalf("roundOrder changed its argument: %s", got)
	}
}

// TestMediansTakeEachRoundsRatio protects the medians table: a ratio is
// taken within a round (between the rows closest in time) and the median
// of those is shown, which is not the ratio of the medians.
func TestMediansTakeEachRoundsRatio(t *testing.T) {
	var rows []row
	// Round ratios 3x, 2.1x, 2x: their median is 2.1x, while the medians'
	// ratio would be 4000 / 2000 = 2x.
	etcd, concord := []float64{1000, 4000, 2000}, []float64{3000, 8400, 4000}
	for i := range etcd {
		rows = append(rows,
			row{System: "etcd", Workload: "put, 100 clients", Tool: "concord bench", OpsPerSec: etcd[i], ServerCPU: 200, Round: i + 1},
			row{System: "concord", Workload: "put, 100 clients", Tool: "concord bench", OpsPerSec: concord[i], ServerCPU: 100, P50: float64(i + 1), Round: i + 1})
	}
	rows = inSystemOrder(rows, []string{"etcd", "concord"})
	if rows[0].System != "etcd" || rows[3].System != "concord" || rows[3].Round != 1 {
		t.Fatalf("rows not in the systems' order, rounds kept: %+v", rows)
	}
	out := formatMedians(rows, 3)
	want := "| concord | put, 100 clients | concord bench | 3 | 4000 | 2.00 | 100 | 2.10× | 0.50× | 3.00× 2.10× 2.00× |"
	if !strings.Contains(out, want) {
		t.Fatalf("medians table:\n%s\nwant the line\n%s", out, want)
	}
	if median([]float64{4, 1, 3, 2}) != 2.5 || median([]float64{5}) != 5 {
		t.Fatal("median")
	}
}
