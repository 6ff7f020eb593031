package cli

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/concord-kv/concord/api/concordpb"
)

func newNodeCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "node",
		Short: "List the cluster's nodes, or remove one",
	}
	cmd.AddCommand(newNodeListCmd(), newNodeRemoveCmd())
	return cmd
}

// nodeJSON is one node in `node list --output json`.
type nodeJSON struct {
	ID                uint64  `json:"id"`
	Addr              string  `json:"addr"`
	State             string  `json:"state"`
	Replicas          uint32  `json:"replicas"`
	Leaders           uint32  `json:"leaders"`
	LastHeartbeatAgeS float64 `json:"last_heartbeat_age_s"` // -1: never heard from
	ReplacedBy        uint64  `json:"replaced_by,omitempty"`
	DiskBytes         uint64  `json:"disk_bytes"`
	RequestRate       float64 `json:"request_rate"`
	// DiskFreeBytes and DiskReserveBytes are the node's last reported
	// free bytes of its data dir's filesystem and its
	// --reserve-disk-bytes (0: the space guard is off); DiskLow is set
	// while it is low on space, which turns the cluster's space alarm on
	// (writes that add data are refused).
	DiskFreeBytes    uint64 `json:"disk_free_bytes"`
	DiskReserveBytes uint64 `json:"disk_reserve_bytes"`
	DiskLow          bool   `json:"disk_low"`
	// Version is the cluster version level the node's binary reported (the
	// table's VERSION column); 0: none reported yet, or a binary from before
	// versions.
	Version uint32 `json:"version"`
	// TentativeWrites are the tentative writes (available mode) the node
	// last reported holding, not yet reconciled: a LEAVING node is
	// removed only once it holds none (or is dead).
	TentativeWrites uint64 `json:"tentative_writes"`
}

func newNodeListCmd() *cobra.Command {
	var f clientFlags
	var stale bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "Show every node: id, address, state, replicas, leaders, last heartbeat",
		Args:  argCount(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := f.status(stale)
			if err != nil {
				return err
			}
			if f.output == "json" {
				return printJSON(cmd.OutOrStdout(), nodesJSON(st))
			}
			printNodes(cmd.OutOrStdout(), st)
			return nil
		},
	}
	addClientFlags(cmd, &f)
	addStaleStatusFlag(cmd, &stale)
	return cmd
}

func nodesJSON(st *concordpb.StatusResponse) []nodeJSON {
	out := []nodeJSON{}
	for _, ns := range st.GetNodes() {
		n := ns.GetNode()
		out = append(out, nodeJSON{ID: n.GetNodeId(), Addr: n.GetAddress(), State: stateName(n.GetState()),
			Replicas: ns.GetReplicas(), Leaders: ns.GetLeaders(), LastHeartbeatAgeS: ns.GetLastHeartbeatAgeSeconds(),
			ReplacedBy: n.GetReplacedBy(), DiskBytes: ns.GetDiskBytes(), RequestRate: ns.GetRequestRate(),
			Version: ns.GetVersion(), DiskFreeBytes: ns.GetDiskFreeBytes(), DiskReserveBytes: ns.GetDiskReserveBytes(), DiskLow: ns.GetDiskLow(),
			TentativeWrites: ns.GetTentativeWrites()})
	}
	return out
}

// stateName is a node state as the CLI prints it: "up", "suspect", ...
func stateName(s concordpb.NodeState) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "NODE_"))
}

func printNodes(out io.Writer, st *concordpb.StatusResponse) {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NODE\tADDRESS\tSTATE\tREPLICAS\tLEADERS\tHEARTBEAT\tDISK\tFREE\tREQ/S\tVERSION")
	for _, ns := range st.GetNodes() {
		n := ns.GetNode()
		state := stateName(n.GetState())
		if n.GetReplacedBy() != 0 {
			state += fmt.Sprintf(" (by %d)", n.GetReplacedBy())
		}
		if t := ns.GetTentativeWrites(); t > 0 && n.GetState() == concordpb.NodeState_NODE_LEAVING {
			// Why a drained node is not removed yet (it waits for them).
			state += fmt.Sprintf(" (holds %s)", counted(int(t), "tentative write"))
		}
		fmt.Fprintf(w, "%d\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%.1f\t%s\n", n.GetNodeId(), n.GetAddress(), state,
			ns.GetReplicas(), ns.GetLeaders(), heartbeatAge(ns), diskSize(ns.GetDiskBytes()), freeText(ns), ns.GetRequestRate(), levelText(ns.GetVersion()))
	}
	w.Flush()
}

// freeText is the free space of a node's data dir's filesystem, with
// "LOW" while it is under its reserve (the space alarm is on); "-" when
// the node reported none (the guard is off, or it has not reported).
func freeText(ns *concordpb.NodeStatus) string {
	switch {
	case ns.GetDiskLow():
		return diskSize(ns.GetDiskFreeBytes()) + " LOW"
	case ns.GetDiskReserveBytes() == 0:
		return "-"
	}
	return diskSize(ns.GetDiskFreeBytes())
}

// levelText is a node's reported cluster version level, "-" if it has
// not reported one (a binary from before versions, or no report yet).
func levelText(v uint32) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprint(v)
}

func heartbeatAge(ns *concordpb.NodeStatus) string {
	if age := ns.GetLastHeartbeatAgeSeconds(); age >= 0 {
		return fmt.Sprintf("%.1fs ago", age)
	}
	return "never"
}

func diskSize(b uint64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.1fG", float64(b)/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1fM", float64(b)/(1<<20))
	}
	return fmt.Sprintf("%.1fK", float64(b)/(1<<10))
}

func newNodeRemoveCmd() *cobra.Command {
	var f clientFlags
	cmd := &cobra.Command{
		Use:   "remove ID",
		Short: "Drain a node out of the cluster: its replicas move away, then it is removed for good",
		Long: "Mark the node LEAVING: the placement service moves its replicas to other nodes and marks it\n" +
			"REMOVED once it holds nothing. A removed node cannot rejoin under its identity. Refused when\n" +
			"fewer nodes than the replication factor would remain up.",
		Args: argCount(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := strconv.ParseUint(args[0], 10, 64)
			if err != nil || id == 0 {
				return fmt.Errorf("node id must be a positive integer, not %q", args[0])
			}
			c, ctx, done, err := f.connect()
			if err != nil {
				return err
			}
			defer done()
			d, err := c.RemoveNode(ctx, id)
			if err != nil {
				return err
			}
			if f.output == "json" {
				return printJSON(cmd.OutOrStdout(), map[string]any{"id": d.GetNodeId(), "addr": d.GetAddress(), "state": stateName(d.GetState())})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "node %d (%s) is %s\n", d.GetNodeId(), d.GetAddress(), stateName(d.GetState()))
			return nil
		},
	}
	addClientFlags(cmd, &f)
	return cmd
}
