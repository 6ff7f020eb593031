package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/client"
)

// unavailableNode is a fake node, leading the only shard, that answers
// every Get and backup stream Unavailable, as a node whose shard has no
// leader: the client retries until its deadline.
type unavailableNode struct {
	concordpb.UnimplementedClusterServer
	concordpb.UnimplementedKVServer
	concordpb.UnimplementedBackupServer
	rt *concordpb.RoutingTableResponse
}

var errNoLeader = status.Error(codes.Unavailable, "shard 1: no leader known")

func (f *unavailableNode) RoutingTable(context.Context, *concordpb.RoutingTableRequest) (*concordpb.RoutingTableResponse, error) {
	return f.rt, nil
}

func (f *unavailableNode) Get(context.Context, *concordpb.GetRequest) (*concordpb.GetResponse, error) {
	return nil, errNoLeader
}

func (f *unavailableNode) Shard(*concordpb.BackupShardRequest, grpc.ServerStreamingServer[concordpb.BackupShardChunk]) error {
	return errNoLeader
}

// startUnavailableNode serves an unavailableNode on 127.0.0.1 and returns
// its address.
func startUnavailableNode(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &unavailableNode{rt: &concordpb.RoutingTableResponse{
		Nodes:  []*concordpb.NodeDescriptor{{NodeId: 1, Address: l.Addr().String()}},
		Shards: []*concordpb.ShardRoute{{Shard: &concordpb.ShardDescriptor{ShardId: 1, EndHash: math.MaxUint64}, LeaderNodeId: 1}},
	}}
	s := grpc.NewServer()
	concordpb.RegisterClusterServer(s, f)
	concordpb.RegisterKVServer(s, f)
	concordpb.RegisterBackupServer(s, f)
	go s.Serve(l)
	t.Cleanup(s.Stop)
	return l.Addr().String()
}

// TestDeadlineErrorReport protects what the command line makes of a
// request that ran out of its --timeout while the cluster answered
// Unavailable: one line on stderr with the last attempt's words, exit
// status 2, and with --output json the code Unavailable (it read Unknown
// while the client kept only the last error's text, and `backup` still
// did: it wrapped its last error with %v).
func TestDeadlineErrorReport(t *testing.T) {
	addr := startUnavailableNode(t)
	backup := filepath.Join(t.TempDir(), "b.backup")
	for _, tc := range []struct {
		name string
		args []string
		text string // the error's text, both outputs
	}{
		{"get", []string{"get", "k", "--timeout", "600ms"}, "context deadline exceeded (last error: shard 1: no leader known)"},
		{"backup", []string{"backup", backup, "--timeout", "800ms"}, "shard 1: context deadline exceeded (last error: shard 1: no leader known)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append(tc.args, "--endpoints", addr)
			var out, errOut bytes.Buffer
			// backup's stderr logs each shard's retry before the error: the
			// error is its last line, the only one that begins "error: ",
			// and none has gRPC's wrapping.
			rc := run(args, &out, &errOut)
			if errLine := "error: " + tc.text + "\n"; rc != 2 || !strings.HasSuffix(errOut.String(), "\n"+errLine) && errOut.String() != errLine ||
				strings.Count("\n"+errOut.String(), "\nerror: ") != 1 || strings.Contains(errOut.String(), "rpc error:") || out.Len() != 0 {
				t.Errorf("%v: exit %d, stderr %q, stdout %q; want exit 2 and stderr ending %q", tc.args, rc, errOut.String(), out.String(), errLine)
			}
			out.Reset()
			errOut.Reset()
			rc = run(append(args, "--output", "json"), &out, &errOut)
			var doc struct {
				Error struct{ Code, Message string }
			}
			if err := json.Unmarshal(out.Bytes(), &doc); err != nil || rc != 2 || strings.Contains("\n"+errOut.String(), "\nerror: ") {
				t.Fatalf("%v --output json: exit %d, stdout %q (%v), stderr %q", tc.args, rc, out.String(), err, errOut.String())
			}
			if doc.Error.Code != "Unavailable" || doc.Error.Message != tc.text {
				t.Errorf("%v --output json: %+v; want code Unavailable, message %q", tc.args, doc.Error, tc.text)
			}
		})
	}
	if _, err := os.Stat(backup); !os.IsNotExist(err) {
		t.Errorf("a failed backup left %s (%v)", backup, err)
	}
}

// TestAmbiguousErrorMarkedInJSON protects the mark on a write whose outcome
// is unknown: its code is the last attempt's (Unavailable after a failover
// that outlasted --timeout), so without "ambiguous": true a script that
// retries on Unavailable could apply a non-idempotent write twice.
func TestAmbiguousErrorMarkedInJSON(t *testing.T) {
	cmd := newPutCmd()
	if err := cmd.Flags().Set("output", "json"); err != nil {
		t.Fatal(err)
	}
	unavailable := status.Error(codes.Unavailable, "shard 1: no leader known")
	for _, tc := range []struct {
		err       error
		ambiguous bool
	}{
		{fmt.Errorf("%w: %w", client.ErrAmbiguous, unavailable), true},
		{unavailable, false},
	} {
		var out, errOut bytes.Buffer
		reportError(&out, &errOut, cmd, tc.err)
		var got struct {
			Error map[string]any `json:"error"`
		}
		if err := json.Unmarshal(out.Bytes(), &got); err != nil {
			t.Fatalf("%v: %q is not JSON: %v", tc.err, out.String(), err)
		}
		if got.Error["code"] != "Unavailable" || (got.Error["ambiguous"] == true) != tc.ambiguous {
			t.Errorf("%v: JSON %v; want code Unavailable, ambiguous %v", tc.err, got.Error, tc.ambiguous)
		}
		if _, ok := got.Error["ambiguous"]; ok && !tc.ambiguous {
			t.Errorf("%v: JSON %v carries ambiguous", tc.err, got.Error)
		}
	}
}
