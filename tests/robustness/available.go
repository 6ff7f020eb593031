package robustness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/client"
	"github.com/concord-kv/concord/internal/testcluster"
)

// availableFaultKinds are the kinds TestAvailableNoLostWrites draws from:
// every classic kind but wipe, since a node that loses its disk loses the
// tentative writes it holds (docs/architecture.md, "What is not"), and of
// the membership kinds join and remove but not killStayDead: a node
// removed while dead loses its hints the same way. A live node being
// removed keeps its hints until it has reconciled them (the placement
// leader removes a LEAVING node only on a report, sent once it knew it was
// leaving, of none held or being held), which remove checks: in this test
// it cuts its node off first (nemesis.cutOffRemoved), so that the node
// holds the writes sent to it when it is asked to leave. space stays: a
// reconciliation refused for space must keep its hints.
var availableFaultKinds = []faultKind{killLeader, killFollower, cleanDie, restart, minority, leaderCutOff, bridge, isolate, pause, pauseLeader, crashAll, space, joinNode, removeNode}

const (
	// availableWriters is how many goroutines write unique keys.
	availableWriters = 4
	// availableOpTimeout bounds one available put: well above the node's
	// --available-timeout (1 s), so that a node that answers at all
	// answers within it (a paused one does not).
	availableOpTimeout = 5 * time.Second
	// availableSettle bounds the wait for every node to hold no tentative
	// write after the heal: a cut-off node's reconciler backs off up to
	// 30 s per shard, and restarts and elections come first.
	availableSettle = 2 * time.Minute
)

// availableAck is one acknowledged available put.
type availableAck struct {
	key, value string
	heldBy     uint64        // the node id holding it as tentative; 0: committed
	sentTo     int           // the index of the node it was sent to
	at         time.Duration // when it was answered, since the run began
}

func (a availableAck) String() string {
	how := "committed"
	if a.heldBy != 0 {
		how = fmt.Sprintf("tentative, held by node id %d", a.heldBy)
	}
	return fmt.Sprintf("%s (%s, sent to node %d, acknowledged at +%v)", a.key, how, a.sentTo+1, a.at.Round(time.Millisecond))
}

// heldElsewhere counts the tentative acks held by a node other than the
// one they were sent to: a client given one node tries the others once
// that one has failed the call (client.Client.call), and the node that
// answers holds it.
func (w *availableWorkload) heldElsewhere(acked []availableAck) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, a := range acked {
		if a.heldBy != 0 && a.heldBy != w.ids[a.sentTo] {
			n++
		}
	}
	return n
}

// availableWorkload writes each of its keys once, with PutAvailable
// through a random node, and records the outcome of every put.
type availableWorkload struct {
	seed  uint64
	start time.Time

	mu sync.Mutex
	// nodes has one client per node, given that node alone, and ids the
	// nodes' ids, by index (none is wiped: they stay); a joined node is
	// added once its join has settled (addNode). A removed node stays: a
	// put sent to it once it has stopped fails, as one to a killed node.
	nodes  []*client.Client // guarded by mu
	ids    []uint64         // guarded by mu
	acked  []availableAck   // guarded by mu
	failed []string         // guarded by mu: keys whose put returned an error
	errs   map[string]int   // guarded by mu: failed puts per kind of error
	byNode map[uint64]int   // guarded by mu: tentative acks per holding node id
}

func newAvailableWorkload(t *testing.T, c *testcluster.Cluster, seed uint64) *availableWorkload {
	w := &availableWorkload{seed: seed, errs: map[string]int{}, byNode: map[uint64]int{}}
	for i := range c.N() {
		w.addNode(t, c, i)
	}
	return w
}

// addNode gives the writers node i, the next index, to write through.
func (w *availableWorkload) addNode(t *testing.T, c *testcluster.Cluster, i int) {
	cl := c.NodeClient(t, i)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	id, err := c.NodeID(ctx, i)
	cancel()
	if err != nil {
		t.Fatalf("node %d's id: %v", i+1, err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if i != len(w.nodes) {
		t.Fatalf("node index %d added after %d nodes", i, len(w.nodes))
	}
	w.nodes = append(w.nodes, cl)
	w.ids = append(w.ids, id)
}

// node picks a node with pick, given how many there are, and returns its
// index and client.
func (w *availableWorkload) node(pick func(n int) int) (int, *client.Client) {
	w.mu.Lock()
	defer w.mu.Unlock()
	i := pick(len(w.nodes))
	return i, w.nodes[i]
}

// run writes until ctx ends.
func (w *availableWorkload) run(ctx context.Context) {
	w.start = time.Now()
	var wg sync.WaitGroup
	for id := range availableWriters {
		wg.Add(1)
		go func() { defer wg.Done(); w.write(ctx, id) }()
	}
	wg.Wait()
}

// write puts av-<id>-<n> for n = 0, 1, ... to a random node each. A put
// runs under its own deadline, not ctx: the end of the run would
// otherwise fail the puts in flight for nothing.
func (w *availableWorkload) write(ctx context.Context, id int) {
	rng := rand.New(rand.NewPCG(w.seed, 0xa7a1+uint64(id)))
	for n := 0; ctx.Err() == nil; n++ {
		k := fmt.Sprintf("av-%d-%d", id, n)
		node, cl := w.node(rng.IntN)
		octx, cancel := context.WithTimeout(context.Background(), availableOpTimeout)
		heldBy, err := cl.PutAvailableHeldBy(octx, []byte(k), []byte(availableValue(k)))
		cancel()
		w.record(k, node, heldBy, err)
		if err != nil {
			// A node that is down fails at once: do not spin on it.
			sleepCtx(ctx, 20*time.Millisecond)
		}
	}
}

// availableValue is the value written under key k: not k itself, so that
// a read answering a key for its value would show.
func availableValue(k string) string { return "value-of-" + k }

func (w *availableWorkload) record(k string, node int, heldBy uint64, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		w.failed = append(w.failed, k)
		w.errs[errorKind(err)]++
		return
	}
	w.acked = append(w.acked, availableAck{key: k, value: availableValue(k), heldBy: heldBy, sentTo: node, at: time.Since(w.start)})
	if heldBy != 0 {
		w.byNode[heldBy]++
	}
}

// errorKind names an error for the counts: ambiguous, no space, or its
// gRPC code.
func errorKind(err error) string {
	switch {
	case errors.Is(err, client.ErrAmbiguous):
		return "ambiguous"
	case errors.Is(err, client.ErrNoSpace):
		return "no-space"
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline"
	}
	return status.Code(err).String()
}

// snapshot returns the acknowledged puts, how many of them were tentative,
// and the keys whose put failed.
func (w *availableWorkload) snapshot() (acked []availableAck, tentative int, failed []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, a := range w.acked {
		if a.heldBy != 0 {
			tentative++
		}
	}
	return slices.Clone(w.acked), tentative, slices.Clone(w.failed)
}

// waitNoTentative polls the concord_tentative_writes of every node in
// live until all are 0, and returns how long that took or why it did not
// happen.
func waitNoTentative(c *testcluster.Cluster, live []int, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var last error
	for {
		last = tentativeHeld(c, live)
		if last == nil {
			return time.Since(start), nil
		}
		if !sleepCtx(ctx, 250*time.Millisecond) {
			return time.Since(start), fmt.Errorf("after %v: %w", timeout, last)
		}
	}
}

// tentativeHeld says which nodes of live still hold tentative writes, or
// nil.
func tentativeHeld(c *testcluster.Cluster, live []int) error {
	var held []string
	for _, i := range live {
		n, err := metricOf(c, i, "concord_tentative_writes")
		if err != nil {
			return err
		}
		if n != 0 {
			held = append(held, fmt.Sprintf("node %d holds %v", i+1, n))
		}
	}
	if len(held) > 0 {
		return fmt.Errorf("tentative writes still held: %s", strings.Join(held, ", "))
	}
	return nil
}

// metricOf reads the sample named exactly name (labels included) from
// node i's /metrics.
func metricOf(c *testcluster.Cluster, i int, name string) (float64, error) {
	resp, err := c.HTTPClient().Get(c.HTTPURL(i, "/metrics"))
	if err != nil {
		return 0, fmt.Errorf("node %d /metrics: %w", i+1, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, fmt.Errorf("node %d /metrics: %w", i+1, err)
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			var f float64
			if _, err := fmt.Sscanf(v, "%g", &f); err == nil {
				return f, nil
			}
		}
	}
	return 0, fmt.Errorf("node %d does not report %s", i+1, name)
}

// readBack reads every key linearizably through cl, a few at a time, and
// returns what each reads (absent keys are missing from the map). A read
// that fails is retried until deadline.
func readBack(cl *client.Client, keys []string, deadline time.Time) (map[string]string, error) {
	var mu sync.Mutex
	got := map[string]string{}
	var firstErr error
	next := make(chan string)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range next {
				v, found, err := readOne(cl, k, deadline)
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				if found {
					got[k] = v
				}
				mu.Unlock()
			}
		}()
	}
	for _, k := range keys {
		next <- k
	}
	close(next)
	wg.Wait()
	return got, firstErr
}

// readOne reads key k linearizably, retrying errors until deadline: a
// node just restarted may refuse reads for a moment.
func readOne(cl *client.Client, k string, deadline time.Time) (string, bool, error) {
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		v, found, err := cl.Get(ctx, []byte(k))
		cancel()
		if err == nil {
			return string(v), found, nil
		}
		if time.Now().After(deadline) {
			return "", false, fmt.Errorf("read back %s: %w", k, err)
		}
		time.Sleep(200 * time.Millisecond) // a pause between retries, not a synchronisation
	}
}
