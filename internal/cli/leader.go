package cli

import (
	"fmt"
	"strconv"

	"github.com/spf13/cobra"
)

func newLeaderCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "leader", Short: "Move shard leadership"}
	cmd.AddCommand(newLeaderTransferCmd())
	return cmd
}

func newLeaderTransferCmd() *cobra.Command {
	var f clientFlags
	cmd := &cobra.Command{
		Use:   "transfer SHARD NODE",
		Short: "Hand SHARD's leadership to its voting replica on NODE; returns once it moved",
		Args:  argCount(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			shard, err := strconv.ParseUint(args[0], 10, 64)
			if err != nil {
				return fmt.Errorf("SHARD must be a shard id (a number), not %q", args[0])
			}
			node, err := strconv.ParseUint(args[1], 10, 64)
			if err != nil || node == 0 {
				return fmt.Errorf("NODE must be a node id (a positive number), not %q", args[1])
			}
			c, ctx, done, err := f.connect()
			if err != nil {
				return err
			}
			defer done()
			resp, err := c.TransferLeader(ctx, shard, node)
			if err != nil {
				return err
			}
			if f.output == "json" {
				return printProtoJSON(cmd.OutOrStdout(), resp)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "shard %d is led by replica %d on node %d\n", shard, resp.GetLeaderReplicaId(), resp.GetLeaderNodeId())
			return nil
		},
	}
	addClientFlags(cmd, &f)
	return cmd
}
