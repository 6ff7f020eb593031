package redisapi

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/api/concordpb"
)

// setPipeline is redis-benchmark's pipelined SET (-d 256 -P 16, one key).
func setPipeline() string {
	cmd := "*3\r\n$3\r\nSET\r\n$16\r\nkey:__rand_int__\r\n$256\r\n" + strings.Repeat("x", 256) + "\r\n"
	return strings.Repeat(cmd, 16)
}

// TestPipelinesReuseTheirMemory: once a pipeline of SETs (or GETs) is
// answered, the next one reads its arguments into the same arena, carves
// its argument lists and plans from the same blocks, and gathers its group
// in the same slices: a pipeline of 16 SETs or GETs allocates only its
// chain's batch (the ops and the request) besides what the backend
// allocates, and for SETs well under the ~4.5 KiB of arguments it carries
// (before: 9 allocations and 12 KiB for SETs, 21 allocations of its own for
// GETs).
func TestPipelinesReuseTheirMemory(t *testing.T) {
	for _, c := range []struct {
		name, pipeline, reply string
		backend               float64 // answerKV's: the results, their pointers, the response, a value per GET
		bytes                 uint64
	}{
		{"SET", setPipeline(), "+OK\r\n", 3, 4 << 10},
		{"GET", strings.Repeat("*2\r\n$3\r\nGET\r\n$16\r\nkey:__rand_int__\r\n", 16), "$1\r\nv\r\n", 3 + 16, 4 << 10},
	} {
		s := New(&answerKV{}, Config{})
		nc := &pipeConn{in: []byte(c.pipeline), n: 1 << 30}
		cn := newConn(s, nc, 1)
		for range 3 { // the reused memory, grown
			cn.servePipeline()
		}
		if n := testing.AllocsPerRun(100, func() {
			if !cn.servePipeline() {
				t.Fatal("the connection ended")
			}
		}); n > c.backend+2 {
			t.Errorf("%s: %.1f allocations per pipeline of 16, want at most %.0f", c.name, n, c.backend+2)
		}
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		for range 100 {
			cn.servePipeline()
		}
		runtime.ReadMemStats(&m1)
		if per := (m1.TotalAlloc - m0.TotalAlloc) / 100; per > c.bytes {
			t.Errorf("%s: %d bytes allocated per pipeline of 16, want under %d", c.name, per, c.bytes)
		}
		if want := len(c.reply) * 16 * nc.sent; nc.written != want {
			t.Errorf("%s: wrote %d bytes for %d pipelines, want %d", c.name, nc.written, nc.sent, want)
		}
		cn.endGroupCtx()
		s.Close(time.Second)
	}
}

// holdKV fails the first write batch once its context ends, as a forward
// cut short by its timeout does, and keeps the batch's ops, as the merge
// queue or a proposal in flight may; it answers every other batch at once,
// recording each op as key=value.
type holdKV struct {
	answerKV
	mu   sync.Mutex
	held []*concordpb.Op
	seen []string
}

func (k *holdKV) Batch(ctx context.Context, r *concordpb.BatchRequest) (*concordpb.BatchResponse, error) {
	k.mu.Lock()
	first := k.held == nil
	if first {
		k.held = r.GetOps()
	}
	for _, op := range r.GetOps() {
		k.seen = append(k.seen, string(op.GetKey())+"="+string(op.GetValue()))
	}
	k.mu.Unlock()
	if first {
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	return k.answerKV.Batch(ctx, r)
}

// TestTimedOutBatchKeepsItsArguments: a pipeline whose batch was cut short
// by its timeout leaves its arguments and SET plans to the batch, which may
// still be sent: the pipelines after it, of the same shape, read into other
// memory, and the held ops keep their keys and values.
func TestTimedOutBatchKeepsItsArguments(t *testing.T) {
	k := &holdKV{}
	s := New(k, Config{CommandTimeout: 50 * time.Millisecond})
	defer s.Close(time.Second)
	pipe := func(tag string) string {
		var cmds []string
		for i := range 16 {
			cmds = append(cmds, fmt.Sprintf("SET k %s-%02d", tag, i))
		}
		return encode(cmds...)
	}
	sc := &scriptConn{pipes: []string{pipe("held"), pipe("next"), pipe("more"), pipe("last")}}
	newConn(s, sc, 1).serve()
	if got := sc.replies[0].String(); !strings.HasPrefix(got, "-AMBIGUOUS") {
		t.Fatalf("the timed-out pipeline was answered %q, want AMBIGUOUS", got)
	}
	for i := 1; i < len(sc.pipes); i++ {
		if got := sc.replies[i].String(); got != strings.Repeat("+OK\r\n", 16) {
			t.Errorf("pipeline %d answered %q", i, got)
		}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.held) != 16 {
		t.Fatalf("%d ops held, want 16", len(k.held))
	}
	for i, op := range k.held {
		if got, want := string(op.GetKey())+"="+string(op.GetValue()), fmt.Sprintf("k=held-%02d", i); got != want {
			t.Errorf("held op %d is now %s, want %s: its memory was reused", i, got, want)
		}
	}
}

// TestQueuedMultiKeepsItsArguments: commands queued by MULTI keep their
// plans and arguments across the pipelines until EXEC: pipelines of the
// same shape read after them into other memory.
func TestQueuedMultiKeepsItsArguments(t *testing.T) {
	k := &holdKV{held: []*concordpb.Op{}} // holds nothing: every batch answered
	s := New(k, Config{})
	defer s.Close(time.Second)
	var sets, want []string
	for i := range 16 {
		sets = append(sets, fmt.Sprintf("SET k other-%02d", i))
		want = append(want, fmt.Sprintf("k=other-%02d", i))
	}
	sc := &scriptConn{pipes: []string{
		encode(sets...), encode(sets...), // memory to reuse
		encode("MULTI"), encode("SET k queued-1"), encode(sets...), encode(sets...), encode("EXEC"),
	}}
	newConn(s, sc, 1).serve()
	if got := sc.replies[len(sc.pipes)-1].String(); got != "*33\r\n"+strings.Repeat("+OK\r\n", 33) {
		t.Fatalf("EXEC answered %q", got)
	}
	want = append(append(append(want, want...), "k=queued-1"), append(want, want...)...)
	k.mu.Lock()
	defer k.mu.Unlock()
	if got := strings.Join(k.seen, " "); got != strings.Join(want, " ") {
		t.Errorf("the backend saw %s,\nwant %s", got, strings.Join(want, " "))
	}
}

// deadlineConn is a scriptConn that records its write deadline and, at
// each write, how long that deadline left from when the pipeline was read
// (before it), and from the write itself (after).
type deadlineConn struct {
	scriptConn
	deadline    time.Time
	sets        int
	pause       time.Duration
	readAt      time.Time
	fromRead    []time.Duration
	fromWriting []time.Duration
}

func (d *deadlineConn) SetWriteDeadline(t time.Time) error {
	d.deadline, d.sets = t, d.sets+1
	return nil
}

func (d *deadlineConn) Read(b []byte) (int, error) {
	time.Sleep(d.pause) // lets time pass between pipelines; nothing waits on it
	d.readAt = time.Now()
	return d.scriptConn.Read(b)
}

func (d *deadlineConn) Write(b []byte) (int, error) {
	d.fromRead = append(d.fromRead, d.deadline.Sub(d.readAt))
	d.fromWriting = append(d.fromWriting, time.Until(d.deadline))
	return d.scriptConn.Write(b)
}

// TestWriteDeadlineBoundsEachPipeline: every pipeline's replies are written
// under a deadline at least WriteTimeout less its hundredth after the
// pipeline was read, and at most WriteTimeout after the write; pipelines
// that follow each other within that hundredth share one deadline instead
// of setting one each, and those further apart set one each.
func TestWriteDeadlineBoundsEachPipeline(t *testing.T) {
	for _, timeout := range []time.Duration{time.Hour, 100 * time.Millisecond} {
		s := New(&fakeKV{counters: map[string]int64{}}, Config{WriteTimeout: timeout})
		dc := &deadlineConn{}
		if timeout < time.Second {
			dc.pause = 2 * timeout / 100
		}
		for range 50 {
			dc.pipes = append(dc.pipes, encode("INCR k", "PING"))
		}
		newConn(s, dc, 1).serve()
		s.Close(time.Second)
		if len(dc.fromRead) != 50 {
			t.Fatalf("%d writes for 50 pipelines", len(dc.fromRead))
		}
		for i := range dc.fromRead {
			if dc.fromRead[i] < timeout-timeout/100 || dc.fromWriting[i] > timeout {
				t.Errorf("timeout %v: pipeline %d written under a deadline %v after its read, %v after its write; want at least %v, at most %v",
					timeout, i, dc.fromRead[i], dc.fromWriting[i], timeout-timeout/100, timeout)
			}
		}
		if want := map[bool]int{true: 1, false: 50}[dc.pause == 0]; dc.sets != want {
			t.Errorf("timeout %v: 50 pipelines %v apart set %d deadlines, want %d", timeout, dc.pause, dc.sets, want)
		}
	}
}
