package bench

import (
	"fmt"
	"io"
	"time"
)

// SampleInterval is how often the sampler records throughput and redraws
// the progress line.
const SampleInterval = 500 * time.Millisecond

// Sample is the throughput of one sampling interval ending at T seconds.
type Sample struct {
	T         float64 `json:"t_sec"`
	OpsPerSec float64 `json:"ops_per_sec"`
	Errors    int64   `json:"errors"`
}

// sampler polls the workers' atomic counters: it never blocks them.
type sampler struct {
	workers []*worker
	start   time.Time
	out     io.Writer // nil: quiet
	stopC   chan struct{}
	doneC   chan []Sample
}

func startSampler(workers []*worker, start time.Time, out io.Writer) *sampler {
	s := &sampler{workers: workers, start: start, out: out, stopC: make(chan struct{}), doneC: make(chan []Sample)}
	go s.loop()
	return s
}

// stop ends sampling and returns the series, including the final partial
// interval.
func (s *sampler) stop() []Sample {
	close(s.stopC)
	return <-s.doneC
}

func (s *sampler) loop() {
	tick := time.NewTicker(SampleInterval)
	defer tick.Stop()
	var series []Sample
	var lastOps, lastErrs int64
	last := s.start
	record := func(now time.Time) {
		ops, errs := s.totals()
		if dt := now.Sub(last).Seconds(); dt > 0.01 {
			series = append(series, Sample{T: now.Sub(s.start).Seconds(),
				OpsPerSec: float64(ops-lastOps) / dt, Errors: errs - lastErrs})
		}
		s.draw(now, ops, errs, series)
		lastOps, lastErrs, last = ops, errs, now
	}
	for {
		select {
		case now := <-tick.C:
			record(now)
		case <-s.stopC:
			record(time.Now())
			if s.out != nil {
				fmt.Fprintln(s.out)
			}
			s.doneC <- series
			return
		}
	}
}

func (s *sampler) totals() (ops, errs int64) {
	for _, w := range s.workers {
		ops += w.done.Load()
		errs += w.errs.Load()
	}
	return ops, errs
}

// draw rewrites the progress line in place (\r, then erase to the end of
// the line); it is only called with a terminal as out.
func (s *sampler) draw(now time.Time, ops, errs int64, series []Sample) {
	if s.out == nil {
		return
	}
	rate := 0.0
	if len(series) > 0 {
		rate = series[len(series)-1].OpsPerSec
	}
	fmt.Fprintf(s.out, "\r\033[K%6.1fs  %10d ops  %9.0f ops/s  %d errors",
		now.Sub(s.start).Seconds(), ops, rate, errs)
}
