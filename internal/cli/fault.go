package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/dial"
)

func newFaultCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "fault",
		Short: "Inject faults into a node started with --enable-fault-injection (test clusters only)",
	}
	var clean bool
	var sec securityFlags
	die := &cobra.Command{
		Use:   "die ADDR",
		Short: "End the node at ADDR: at once as after a power cut, or with --clean gracefully",
		Args:  argCount(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withAdmin(sec, args[0], func(ctx context.Context, a concordpb.AdminClient) error {
				_, err := a.Die(ctx, &concordpb.DieRequest{Clean: clean})
				if err == nil {
					fmt.Fprintln(cmd.OutOrStdout(), "OK")
				}
				return err
			})
		},
	}
	die.Flags().BoolVar(&clean, "clean", false, "finish in-flight work, hand off leaderships, flush, exit 0")
	partition := &cobra.Command{
		Use:   "partition ADDR [REACHABLE...]",
		Short: "Cut the node at ADDR off from every peer not listed (no list: isolate it)",
		Args:  argCount(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withAdmin(sec, args[0], func(ctx context.Context, a concordpb.AdminClient) error {
				resp, err := a.Partition(ctx, &concordpb.PartitionRequest{Reachable: args[1:]})
				if err == nil {
					fmt.Fprintf(cmd.OutOrStdout(), "OK: cut off from nodes %v\n", resp.GetBlockedNodeIds())
				}
				return err
			})
		},
	}
	heal := &cobra.Command{
		Use:   "heal ADDR",
		Short: "Make the node at ADDR reachable from every peer again",
		Args:  argCount(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withAdmin(sec, args[0], func(ctx context.Context, a concordpb.AdminClient) error {
				_, err := a.Heal(ctx, &concordpb.HealRequest{})
				if err == nil {
					fmt.Fprintln(cmd.OutOrStdout(), "OK")
				}
				return err
			})
		},
	}
	diskLow := &cobra.Command{
		Use:   "disk-low ADDR on|off",
		Short: "Make the node at ADDR read its disk as full (on: 0 free bytes, so the space alarm goes up) or measure it again (off)",
		Args:  diskLowArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return withAdmin(sec, args[0], func(ctx context.Context, a concordpb.AdminClient) error {
				_, err := a.DiskLow(ctx, &concordpb.DiskLowRequest{Low: args[1] == "on"})
				if err == nil {
					fmt.Fprintln(cmd.OutOrStdout(), "OK")
				}
				return err
			})
		},
	}
	for _, c := range []*cobra.Command{die, partition, heal, diskLow} {
		addSecurityFlags(c.Flags(), &sec)
	}
	cmd.AddCommand(die, partition, heal, diskLow)
	return cmd
}

// diskLowArgs checks disk-low's arguments before anything is dialed: an
// address and on or off (any other word, "true" or "ON" included, is
// refused rather than read as off).
func diskLowArgs(cmd *cobra.Command, args []string) error {
	if err := argCount(cobra.ExactArgs(2))(cmd, args); err != nil {
		return err
	}
	if args[1] != "on" && args[1] != "off" {
		return fmt.Errorf("disk-low takes on or off after the address, not %q", args[1])
	}
	return nil
}

func withAdmin(sec securityFlags, addr string, f func(context.Context, concordpb.AdminClient) error) error {
	opts, err := sec.dialOptions()
	if err != nil {
		return err
	}
	conn, err := dial.Dial(addr, opts...)
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return f(ctx, concordpb.NewAdminClient(conn))
}
