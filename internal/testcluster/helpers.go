package testcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/client"
	"github.com/concord-kv/concord/internal/certs"
	"github.com/concord-kv/concord/internal/localcluster"
	"github.com/concord-kv/concord/internal/routing"
	"github.com/concord-kv/concord/internal/version"
)

// WaitFor polls cond until it returns nil, and returns how long that took.
// If timeout passes first, the test fails with cond's last error.
func WaitFor(t testing.TB, timeout time.Duration, cond func() error) time.Duration {
	t.Helper()
	d, err := localcluster.WaitFor(context.Background(), timeout, cond)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// Client returns a client of the whole cluster, closed when the test ends.
func (c *Cluster) Client(t testing.TB) *client.Client {
	t.Helper()
	return c.newClient(t, c.Endpoints()...)
}

// NodeClient returns a client given node i's address alone.
func (c *Cluster) NodeClient(t testing.TB, i int) *client.Client {
	t.Helper()
	return c.newClient(t, c.Addr(i))
}

// ClientOptions are the options of a client of the cluster: its TLS CA
// and token, when it has them, and endpoints.
func (c *Cluster) ClientOptions(endpoints ...string) client.Options {
	s := c.lc.Security()
	return client.Options{Endpoints: endpoints, TLSCAFile: s.CAFile, AuthToken: s.Token}
}

func (c *Cluster) newClient(t testing.TB, endpoints ...string) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := client.NewWithOptions(ctx, c.ClientOptions(endpoints...))
	if err != nil {
		t.Fatalf("testcluster: client for %v: %v", endpoints, err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// Conn returns a gRPC connection to node i alone (no routing, no retries),
// shared by the cluster's helpers and closed when the test ends. It
// reconnects by itself across restarts of the node.
func (c *Cluster) Conn(i int) *grpc.ClientConn {
	conn, err := c.lc.Conn(i)
	if err != nil {
		panic(fmt.Sprintf("testcluster: dial %s: %v", c.Addr(i), err)) // a malformed target, or after the test
	}
	return conn
}

// KV is the raw KV service of node i.
func (c *Cluster) KV(i int) concordpb.KVClient { return concordpb.NewKVClient(c.Conn(i)) }

// ClusterAPI is the raw Cluster service of node i.
func (c *Cluster) ClusterAPI(i int) concordpb.ClusterClient {
	return concordpb.NewClusterClient(c.Conn(i))
}

// RoutingTable asks node i (alone) for its routing table.
func (c *Cluster) RoutingTable(ctx context.Context, i int) (*concordpb.RoutingTableResponse, error) {
	return c.lc.RoutingTable(ctx, i)
}

// WaitReady waits until every running node serves a routing table that
// names a leader for each user shard, and returns how long that took.
func (c *Cluster) WaitReady(t testing.TB, timeout time.Duration) time.Duration {
	t.Helper()
	d, err := c.lc.WaitReady(context.Background(), timeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("testcluster: cluster ready after %v", d.Round(time.Millisecond))
	return d
}

// NodeID returns the node id of node i as it reports itself: the id of the
// live (not REPLACED) entry for its address in its own routing table.
func (c *Cluster) NodeID(ctx context.Context, i int) (uint64, error) {
	rt, err := c.RoutingTable(ctx, i)
	if err != nil {
		return 0, err
	}
	var id uint64
	for _, n := range rt.GetNodes() {
		if n.GetAddress() == c.Addr(i) && n.GetState() == concordpb.NodeState_NODE_UP {
			id = max(id, n.GetNodeId())
		}
	}
	if id == 0 {
		return 0, fmt.Errorf("node %d does not list itself (%s) as an up node", i, c.Addr(i))
	}
	return id, nil
}

// Leader returns the index of the running node whose own routing table says
// it leads user shard shard, or an error if none does right now. (Routing
// tables list user shards only, not the meta shard.)
func (c *Cluster) Leader(ctx context.Context, shard uint64) (int, error) {
	var errs []error
	for i := 0; i < c.N(); i++ {
		if !c.Running(i) {
			continue
		}
		rt, err := c.RoutingTable(ctx, i)
		if err != nil {
			errs = append(errs, fmt.Errorf("node %d: %w", i, err))
			continue
		}
		self := uint64(0)
		for _, n := range rt.GetNodes() {
			if n.GetAddress() == c.Addr(i) && n.GetState() == concordpb.NodeState_NODE_UP {
				self = max(self, n.GetNodeId())
			}
		}
		for _, s := range rt.GetShards() {
			if s.GetShard().GetShardId() == shard && self != 0 && s.GetLeaderNodeId() == self {
				return i, nil
			}
		}
	}
	errs = append(errs, fmt.Errorf("no running node says it leads shard %d", shard))
	return -1, errors.Join(errs...)
}

// LeaderOf waits up to timeout for a running node to lead user shard and
// returns its index.
func (c *Cluster) LeaderOf(t testing.TB, shard uint64, timeout time.Duration) int {
	t.Helper()
	leader := -1
	WaitFor(t, timeout, func() error {
		var err error
		leader, err = c.Leader(context.Background(), shard)
		return err
	})
	return leader
}

// StaleGet reads key from node i's local replica (consistency STALE, sent to
// node i alone). The response header's served_by_node_id says which node
// answered (a node without a replica of the key's shard forwards).
func (c *Cluster) StaleGet(ctx context.Context, i int, key []byte) (*concordpb.GetResponse, error) {
	return c.KV(i).Get(ctx, &concordpb.GetRequest{
		Header: &concordpb.RequestHeader{Consistency: concordpb.Consistency_STALE}, Key: key})
}

// StaleScan returns every key-value pair in node i's local replicas (a
// STALE scan of the whole key space sent to node i alone, page by page).
func (c *Cluster) StaleScan(ctx context.Context, i int) (map[string]string, error) {
	out := map[string]string{}
	var start []byte
	for {
		resp, err := c.KV(i).Scan(ctx, &concordpb.ScanRequest{
			Header: &concordpb.RequestHeader{Consistency: concordpb.Consistency_STALE}, Start: start, Limit: 5000})
		if err != nil {
			return out, err
		}
		for _, kv := range resp.GetKvs() {
			out[string(kv.GetKey())] = string(kv.GetValue())
		}
		if !resp.GetMore() || len(resp.GetNextStart()) == 0 {
			return out, nil
		}
		start = resp.GetNextStart()
	}
}

// KeyInShard returns the first key prefix+N (N = 0, 1, ...) that the routing
// table rt places in shard.
func KeyInShard(rt *concordpb.RoutingTableResponse, shard uint64, prefix string) []byte {
	table := tableOf(rt)
	for n := 0; ; n++ {
		k := []byte(fmt.Sprintf("%s%d", prefix, n))
		if d := table.Lookup(k); d != nil && d.GetShardId() == shard {
			return k
		}
		if n > 1_000_000 {
			panic(fmt.Sprintf("testcluster: no key for shard %d in routing table", shard))
		}
	}
}

// ShardOf returns the shard that the routing table rt places key in (0 if none).
func ShardOf(rt *concordpb.RoutingTableResponse, key []byte) uint64 {
	return tableOf(rt).Lookup(key).GetShardId()
}

func tableOf(rt *concordpb.RoutingTableResponse) *routing.Table {
	var descs []*concordpb.ShardDescriptor
	for _, s := range rt.GetShards() {
		descs = append(descs, s.GetShard())
	}
	return routing.NewTable(descs)
}

// HTTPURL is the URL of path on node i's HTTP front door: https for a TLS
// cluster.
func (c *Cluster) HTTPURL(i int, path string) string {
	scheme := "http"
	if c.lc.CAFile() != "" {
		scheme = "https"
	}
	return scheme + "://" + c.HTTPAddr(i) + path
}

// HTTPClient is an HTTP client for the nodes' front doors: one that trusts
// the cluster's CA when it has TLS.
func (c *Cluster) HTTPClient() *http.Client {
	hc := &http.Client{Timeout: 10 * time.Second}
	if ca := c.lc.CAFile(); ca != "" {
		cfg, err := certs.ClientConfig(ca, "", "")
		if err != nil {
			panic(fmt.Sprintf("testcluster: %v", err)) // the launcher made the CA
		}
		hc.Transport = &http.Transport{TLSClientConfig: cfg}
	}
	return hc
}

// Metric reads the value of the sample named exactly name (labels
// included, as `m{k="v"}`) from node i's /metrics (the cluster needs
// Options.HTTP): -1 if the node exports no such sample.
func (c *Cluster) Metric(i int, name string) (float64, error) {
	resp, err := c.HTTPClient().Get(c.HTTPURL(i, "/metrics"))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			var f float64
			if _, err := fmt.Sscanf(v, "%g", &f); err == nil {
				return f, nil
			}
		}
	}
	return -1, nil
}

// WaitClusterVersion waits until every running node knows that the
// cluster's version is at least level (concord_cluster_version; the cluster
// needs Options.HTTP). A fresh cluster starts below it and raises it from
// heartbeats: a feature gated on it (available mode's tentative writes)
// is off on a node until then, and stays off on a node cut off before it
// learned it.
func (c *Cluster) WaitClusterVersion(t testing.TB, level version.Level, timeout time.Duration) {
	t.Helper()
	WaitFor(t, timeout, func() error {
		for i := range c.N() {
			if !c.Running(i) {
				continue
			}
			v, err := c.Metric(i, "concord_cluster_version")
			if err != nil {
				return fmt.Errorf("node %d: %w", i+1, err)
			}
			if v < float64(level) {
				return fmt.Errorf("node %d knows cluster version %v, want %d", i+1, v, level)
			}
		}
		return nil
	})
}
