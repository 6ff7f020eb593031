package client

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/frame"
)

// TestAuthTokenChecked: a token the wires cannot carry (a newline left by
// a file read without trimming, a space, more than frame.MaxTokenBytes) is
// refused by New at once, naming the option and never quoting the token,
// and no connection is made. Before, New dialed with it and failed later
// with whatever gRPC or the node made of the header.
func TestAuthTokenChecked(t *testing.T) {
	l := &countingListener{Listener: listen(t)}
	f := &streamNode{rt: &concordpb.RoutingTableResponse{
		Nodes:  []*concordpb.NodeDescriptor{{NodeId: 1, Address: l.Addr().String()}},
		Shards: []*concordpb.ShardRoute{{Shard: &concordpb.ShardDescriptor{ShardId: 1, EndHash: math.MaxUint64}, LeaderNodeId: 1}},
	}}
	s := newServer(t)
	concordpb.RegisterKVServer(s, f)
	concordpb.RegisterClusterServer(s, f)
	go s.Serve(l)
	for _, tok := range []string{"s3cret\n", "s3c ret", "\ts3cret", strings.Repeat("s", frame.MaxTokenBytes+1)} {
		for _, wire := range []string{WireTCP, WireGRPC} {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			start := time.Now()
			c, err := NewWithOptions(ctx, Options{Endpoints: []string{l.Addr().String()}, AuthToken: tok, Wire: wire})
			cancel()
			if err == nil {
				c.Close()
				t.Errorf("token %.8q over %s: New succeeded, want a refusal", tok, wire)
				continue
			}
			if !strings.Contains(err.Error(), "AuthToken") || strings.Contains(err.Error(), "s3c") || strings.Contains(err.Error(), "sss") {
				t.Errorf("token %.8q over %s: error %q, want one naming AuthToken without quoting the token", tok, wire, err)
			}
			if d := time.Since(start); d > time.Second {
				t.Errorf("token %.8q over %s: refused after %v, want at once", tok, wire, d)
			}
		}
	}
	if n := l.n.Load(); n != 0 {
		t.Errorf("%d connections made with a bad token, want none", n)
	}
}
