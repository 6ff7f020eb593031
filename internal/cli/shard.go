package cli

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/routing"
)

func newShardCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "shard",
		Short: "List the shards",
	}
	cmd.AddCommand(newShardListCmd())
	return cmd
}

// shardJSON is one shard in `shard list --output json`. Replicas and Roles
// are parallel: the node id of each replica and its role.
type shardJSON struct {
	ID              uint64   `json:"id"`
	Meta            bool     `json:"meta"`
	StartHash       uint64   `json:"start_hash"`
	EndHash         uint64   `json:"end_hash"`
	Replicas        []uint64 `json:"replicas"`
	ReplicaIDs      []uint64 `json:"replica_ids"`
	Roles           []string `json:"roles"`
	Leader          uint64   `json:"leader"` // node id; 0 if unknown
	Epoch           uint64   `json:"epoch"`
	UnderReplicated bool     `json:"under_replicated"`
	// KeyHash is how keys hash to shards: "tags" (Redis Cluster's hash
	// tags, every cluster bootstrapped since they exist) or "whole" (the
	// whole key, clusters bootstrapped before).
	KeyHash string `json:"key_hash"`
	// ApproxBytes is the shard's approximate size on disk as the placement
	// leader last saw it (the largest its replicas' nodes report); 0:
	// unknown.
	ApproxBytes uint64 `json:"approx_bytes"`
}

func newShardListCmd() *cobra.Command {
	var f clientFlags
	var stale bool
	var meta bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "Show every user shard: hash range, replicas with roles, leader, epoch, under-replication, size",
		Args:  argCount(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := f.status(stale)
			if err != nil {
				return err
			}
			shards := shardsJSON(st, meta)
			if f.output == "json" {
				return printJSON(cmd.OutOrStdout(), shards)
			}
			printShards(cmd.OutOrStdout(), shards)
			return nil
		},
	}
	addClientFlags(cmd, &f)
	addStaleStatusFlag(cmd, &stale)
	cmd.Flags().BoolVar(&meta, "meta", false, "also list the meta shard (shard 0, the placement service)")
	return cmd
}

func shardsJSON(st *concordpb.StatusResponse, meta bool) []shardJSON {
	out := []shardJSON{}
	for _, ss := range st.GetShards() {
		if ss.GetIsMeta() && !meta {
			continue
		}
		d := ss.GetShard()
		s := shardJSON{ID: d.GetShardId(), Meta: ss.GetIsMeta(), StartHash: d.GetStartHash(), EndHash: d.GetEndHash(),
			Replicas: []uint64{}, ReplicaIDs: []uint64{}, Roles: []string{},
			Leader: ss.GetLeaderNodeId(), Epoch: d.GetEpoch(), UnderReplicated: ss.GetUnderReplicated(), KeyHash: keyHashName(d.GetKeyHash()),
			ApproxBytes: ss.GetApproxBytes()}
		for _, r := range d.GetReplicas() {
			s.Replicas = append(s.Replicas, r.GetNodeId())
			s.ReplicaIDs = append(s.ReplicaIDs, r.GetReplicaId())
			s.Roles = append(s.Roles, roleName(r.GetRole()))
		}
		out = append(out, s)
	}
	return out
}

func keyHashName(scheme uint32) string {
	switch scheme {
	case routing.KeyHashWhole:
		return "whole"
	case routing.KeyHashTags:
		return "tags"
	}
	return fmt.Sprintf("unknown (%d)", scheme)
}

func roleName(r concordpb.ReplicaRole) string {
	return strings.ToLower(strings.TrimPrefix(r.String(), "REPLICA_"))
}

func printShards(out io.Writer, shards []shardJSON) {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "SHARD\tHASH RANGE\tKEY HASH\tLEADER\tEPOCH\tREPLICAS (replica@node role)\tUNDER-REPLICATED\tSIZE")
	for _, s := range shards {
		name := fmt.Sprint(s.ID)
		if s.Meta {
			name += " (meta)"
		}
		leader := "-"
		if s.Leader != 0 {
			leader = fmt.Sprintf("node %d", s.Leader)
		}
		reps := make([]string, len(s.Replicas))
		for i := range s.Replicas {
			reps[i] = fmt.Sprintf("%d@%d %s", s.ReplicaIDs[i], s.Replicas[i], s.Roles[i])
		}
		under := ""
		if s.UnderReplicated {
			under = "yes"
		}
		fmt.Fprintf(w, "%s\t%016x-%016x\t%s\t%s\t%d\t%s\t%s\t%s\n", name, s.StartHash, s.EndHash, s.KeyHash, leader, s.Epoch, strings.Join(reps, ", "), under,
			shardSize(s.ApproxBytes))
	}
	w.Flush()
}

// shardSize is a shard's approximate size as the tables show it (as
// node list shows disk bytes), "-" when unknown (0).
func shardSize(b uint64) string {
	if b == 0 {
		return "-"
	}
	return diskSize(b)
}
