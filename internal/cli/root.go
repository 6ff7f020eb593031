// Package cli is the concord command line: one file per verb, registered
// here. The same binary runs a node (server), a local cluster (cluster up),
// the client verbs (put, get, del, cas, scan, status) and the load
// generator (bench).
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/client"
	"github.com/concord-kv/concord/internal/node"
)

// ExitError carries a process exit code without printing a usage error.
type ExitError struct{ Code int }

func (e ExitError) Error() string { return fmt.Sprintf("exit status %d", e.Code) }

// Main runs the command line and returns the process exit code.
func Main(args []string) int { return run(args, os.Stdout, os.Stderr) }

// run is Main writing to stdout and stderr (a test's buffers).
func run(args []string, stdout, stderr io.Writer) int {
	root := NewRoot()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteC()
	if err == nil {
		return 0
	}
	if e, ok := err.(ExitError); ok {
		return e.Code
	}
	reportError(stdout, stderr, cmd, err)
	if errors.Is(err, node.ErrRemoved) {
		return ExitRemoved
	}
	return 2
}

// ExitRemoved is the exit code of `concord server` when the node's identity
// was removed from the cluster (at start, or while it ran): restarting it
// cannot help, so supervisors are told not to (deploy/systemd's
// RestartPreventExitStatus); any other failure exits 2.
const ExitRemoved = 3

// NewRoot builds the command tree.
func NewRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "concord",
		Short:         "Concord: a sharded, replicated, durable key-value store",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(
		newServerCmd(),
		newClusterCmd(),
		newPutCmd(),
		newGetCmd(),
		newDelCmd(),
		newCasCmd(),
		newScanCmd(),
		newStatusCmd(),
		newLeaderCmd(),
		newNodeCmd(),
		newShardCmd(),
		newFaultCmd(),
		newBenchCmd(),
		newBackupCmd(),
		newRestoreCmd(),
		newCertsCmd(),
	)
	refuseUnknownSubcommands(root) // first: the groups become runnable, and take --config as every runnable command does
	withSettingsAll(root)
	return root
}

// refuseUnknownSubcommands makes every command group below root (node,
// shard, cluster, leader, fault) fail on a word that is none of its
// subcommands. Cobra runs only root's check: a group without a Run of its
// own printed its help and exited 0, so `concord node join x` or a typo
// like `concord shard lsit` looked like a success to a script. Alone, a
// group still prints its help.
func refuseUnknownSubcommands(c *cobra.Command) {
	for _, sub := range c.Commands() {
		refuseUnknownSubcommands(sub)
		if sub.HasSubCommands() && !sub.Runnable() {
			sub.Args = cobra.NoArgs
			sub.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
		}
	}
}

// withSettingsAll gives every runnable command --config and CONCORD_*
// environment variables (config.go).
func withSettingsAll(c *cobra.Command) {
	for _, sub := range c.Commands() {
		withSettingsAll(sub)
	}
	if c.RunE != nil || c.Run != nil {
		withSettings(c)
	}
}

// clientFlags are the flags every client verb takes.
type clientFlags struct {
	endpoints string
	output    string
	timeout   time.Duration
	sec       securityFlags
}

func addClientFlags(cmd *cobra.Command, f *clientFlags) {
	def := os.Getenv("CONCORD_ENDPOINTS")
	if def == "" {
		def = "127.0.0.1:7001"
	}
	cmd.Flags().StringVar(&f.endpoints, "endpoints", def, "comma-separated node addresses (env CONCORD_ENDPOINTS)")
	cmd.Flags().StringVarP(&f.output, "output", "o", "text", "output format: text or json")
	cmd.Flags().DurationVar(&f.timeout, "timeout", 10*time.Second, "how long to keep retrying before giving up")
	addSecurityFlags(cmd.Flags(), &f.sec)
}

// connect returns a client, a context bounded by the timeout, and the
// function that releases both.
func (f *clientFlags) connect() (*client.Client, context.Context, func(), error) {
	if f.output != "text" && f.output != "json" {
		return nil, nil, nil, fmt.Errorf("--output must be text or json, not %q", f.output)
	}
	if err := checkTimeout(f.timeout); err != nil {
		return nil, nil, nil, err
	}
	opts, err := f.sec.clientOptions()
	if err != nil {
		return nil, nil, nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
	var eps []string
	for _, e := range strings.Split(f.endpoints, ",") {
		if e = strings.TrimSpace(e); e != "" {
			eps = append(eps, e)
		}
	}
	opts.Endpoints = eps
	c, err := client.NewWithOptions(ctx, opts)
	if err != nil {
		cancel()
		return nil, nil, nil, f.sec.hint(err)
	}
	return c, ctx, func() { c.Close(); cancel() }, nil
}

// checkTimeout refuses a --timeout that leaves no time at all: the client
// then failed with "context deadline exceeded (last error: no node
// known)", which blamed the cluster for the flag.
func checkTimeout(d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("--timeout must be positive, got %v", d)
	}
	return nil
}

// status connects, asks the cluster for its status (what status, node list
// and shard list print; stale: without the placement leader confirming its
// leadership) and disconnects.
func (f *clientFlags) status(stale bool) (*concordpb.StatusResponse, error) {
	c, ctx, done, err := f.connect()
	if err != nil {
		return nil, err
	}
	defer done()
	if stale {
		return c.StaleStatus(ctx)
	}
	return c.Status(ctx)
}

// addStaleStatusFlag adds --stale to a verb that prints the cluster's status.
func addStaleStatusFlag(cmd *cobra.Command, stale *bool) {
	cmd.Flags().BoolVar(stale, "stale", false,
		"answer without the placement leader confirming it still leads, and with the answering node's own view if the leader cannot be reached (may be behind)")
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func printProtoJSON(w io.Writer, m proto.Message) error {
	b, err := protojson.MarshalOptions{Multiline: true, Indent: "  ", EmitUnpopulated: true}.Marshal(m)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(w, string(b))
	return err
}
