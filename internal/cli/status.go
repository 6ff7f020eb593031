package cli

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/concord-kv/concord/api/concordpb"
)

func newStatusCmd() *cobra.Command {
	var f clientFlags
	var stale bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the cluster's nodes and every shard's leader, term, applied index, replicas and size",
		Args:  argCount(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := f.status(stale)
			if err != nil {
				return err
			}
			if f.output == "json" {
				return printProtoJSON(cmd.OutOrStdout(), st)
			}
			printStatus(cmd.OutOrStdout(), st)
			return nil
		},
	}
	addClientFlags(cmd, &f)
	addStaleStatusFlag(cmd, &stale)
	return cmd
}

func printStatus(out io.Writer, st *concordpb.StatusResponse) {
	fmt.Fprintf(out, "cluster %x (answered by node %d), cluster version %d\n\n", st.GetClusterId(), st.GetAnsweredByNodeId(), st.GetClusterVersion())
	printNodes(out, st)
	fmt.Fprintln(out)
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "SHARD\tLEADER\tTERM\tCOMMIT\tAPPLIED\tEPOCH\tREPLICAS (replica@node)\tUNDER-REPLICATED\tSIZE")
	for _, ss := range st.GetShards() {
		name := fmt.Sprint(ss.GetShard().GetShardId())
		if ss.GetIsMeta() {
			name += " (meta)"
		}
		leader := "-"
		if ss.GetLeaderNodeId() != 0 {
			leader = fmt.Sprintf("node %d", ss.GetLeaderNodeId())
		}
		var reps []string
		for _, r := range ss.GetShard().GetReplicas() {
			rep := fmt.Sprintf("%d@%d", r.GetReplicaId(), r.GetNodeId())
			if r.GetRole() == concordpb.ReplicaRole_REPLICA_LEARNER {
				rep += "(learner)"
			}
			reps = append(reps, rep)
		}
		under := ""
		if ss.GetUnderReplicated() {
			under = "yes"
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s\n", name, leader, ss.GetTerm(), ss.GetCommitIndex(), ss.GetAppliedIndex(),
			ss.GetShard().GetEpoch(), strings.Join(reps, " "), under, shardSize(ss.GetApproxBytes()))
	}
	w.Flush()
}
