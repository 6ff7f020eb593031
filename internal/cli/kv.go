package cli

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/concord-kv/concord/client"
)

func newPutCmd() *cobra.Command {
	var f clientFlags
	var ttl time.Duration
	var prev, available bool
	key, value := keyOperand(), valueOperand("VALUE", "value-file")
	cmd := &cobra.Command{
		Use:   "put KEY VALUE",
		Short: "Store VALUE under KEY",
		Long: "Store VALUE under KEY, removing any expiry the key had. With --ttl the key expires that long\n" +
			"after the put applies (e.g. --ttl 10s, --ttl 1h30m): it then reads as absent and is deleted.\n" +
			"With --prev it prints the value KEY had before (\"(none)\" if it had none) instead of OK;\n" +
			"without it the put is a blind write, which the shard applies without reading the key.\n" +
			"--key-file and --value-file take KEY and VALUE from files instead, byte for byte: the way\n" +
			"to store binary bytes (an argument cannot hold a NUL byte), e.g.\n" +
			"  head -c 100 /dev/urandom | concord put --key-file k.bin --value-file -\n" +
			"With --available the put goes through the node it reaches; if the key's shard cannot commit it\n" +
			"within that node's --available-timeout (no quorum), the node holds it as a tentative write and\n" +
			"proposes it when the shard has a quorum again, where the newest version of the key wins\n" +
			"(\"OK (tentative: ...)\"; JSON \"tentative\": true). See docs/architecture.md, \"Available mode\".",
		Args: cobra.ArbitraryArgs, // readOperands checks the count, as the file flags leave it
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("ttl") && ttl <= 0 {
				return fmt.Errorf("--ttl must be positive, got %v", ttl)
			}
			if available && (cmd.Flags().Changed("ttl") || prev) {
				return errors.New("--available takes a plain put: not with --ttl or --prev")
			}
			kv, err := readOperands("put", args, []*operand{key, value}, cmd.InOrStdin())
			if err != nil {
				return err
			}
			c, ctx, done, err := f.connect()
			if err != nil {
				return err
			}
			defer done()
			if available {
				heldBy, err := c.PutAvailableHeldBy(ctx, kv[0], kv[1])
				if err != nil {
					return err
				}
				return printAvailableWrite(cmd, f.output == "json", kv[0], heldBy)
			}
			var opts []client.PutOption
			if ttl > 0 {
				opts = append(opts, client.TTL(ttl))
			}
			if prev {
				opts = append(opts, client.ReturnPrev())
			}
			old, existed, err := c.Put(ctx, kv[0], kv[1], opts...)
			if err != nil {
				return err
			}
			return printPut(cmd, f.output == "json", prev, old, existed)
		},
	}
	cmd.Flags().DurationVar(&ttl, "ttl", 0, "time to live (e.g. 10s); none by default")
	cmd.Flags().BoolVar(&prev, "prev", false, "print the previous value (the shard then reads the key before writing it)")
	cmd.Flags().BoolVar(&available, "available", false, "available mode: if the shard has no quorum, the node reached holds the put as tentative and reconciles it later (last writer wins)")
	addOperandFlag(cmd, key)
	addOperandFlag(cmd, value)
	addClientFlags(cmd, &f)
	return cmd
}

// printAvailableWrite prints an available write's outcome: OK, saying
// which node holds it when it is tentative; as JSON, ok and tentative
// (and held_by when it is).
func printAvailableWrite(cmd *cobra.Command, asJSON bool, key []byte, heldBy uint64) error {
	out := cmd.OutOrStdout()
	if asJSON {
		j := map[string]any{"ok": true, "tentative": heldBy != 0}
		if heldBy != 0 {
			j["held_by"] = heldBy
		}
		setBytes(j, "key", key)
		return printJSON(out, j)
	}
	if heldBy != 0 {
		fmt.Fprintf(out, "OK (tentative: held by node %d until its shard has a quorum)\n", heldBy)
		return nil
	}
	fmt.Fprintln(out, "OK")
	return nil
}

// printPut prints a put's outcome: OK, or with --prev the previous value;
// as JSON, prev_exists and prev_value only with --prev.
func printPut(cmd *cobra.Command, asJSON, prev bool, old []byte, existed bool) error {
	out := cmd.OutOrStdout()
	switch {
	case asJSON && prev:
		j := map[string]any{"ok": true, "prev_exists": existed}
		setBytes(j, "prev_value", old)
		return printJSON(out, j)
	case asJSON:
		return printJSON(out, map[string]any{"ok": true})
	case prev && existed:
		fmt.Fprintln(out, string(old))
	case prev:
		fmt.Fprintln(out, "(none)")
	default:
		fmt.Fprintln(out, "OK")
	}
	return nil
}

func newGetCmd() *cobra.Command {
	var f clientFlags
	var stale, available bool
	key := keyOperand()
	cmd := &cobra.Command{
		Use:   "get KEY",
		Short: "Print the value of KEY (exit status 1 if it does not exist)",
		Long: "Print the value of KEY (exit status 1 if it does not exist). --key-file takes KEY from a file\n" +
			"instead, byte for byte; -o json carries binary keys and values exactly (value_base64).\n" +
			"--available reads as --stale does, and sees the tentative write of the key the answering node\n" +
			"holds, if any (put --available).",
		Args: cobra.ArbitraryArgs, // readOperands checks the count, as the file flags leave it
		RunE: func(cmd *cobra.Command, args []string) error {
			if stale && available {
				return errors.New("--stale and --available are exclusive: --available reads as --stale does, and sees the node's tentative writes")
			}
			k, err := readOperands("get", args, []*operand{key}, cmd.InOrStdin())
			if err != nil {
				return err
			}
			c, ctx, done, err := f.connect()
			if err != nil {
				return err
			}
			defer done()
			var opts []client.ReadOption
			if stale {
				opts = append(opts, client.Stale())
			}
			if available {
				opts = append(opts, client.Available())
			}
			v, expireAt, found, err := c.GetWithExpiry(ctx, k[0], opts...)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			switch {
			case f.output == "json":
				if err := printJSON(out, getJSON(k[0], v, found, expireAt)); err != nil {
					return err
				}
			case found:
				fmt.Fprintln(out, string(v))
			default:
				fmt.Fprintln(out, "not found")
			}
			if !found {
				return ExitError{Code: 1}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&stale, "stale", false, "read the answering node's replica without confirming leadership (may be behind)")
	cmd.Flags().BoolVar(&available, "available", false, "as --stale, and see the tentative write of the key the answering node holds (available mode)")
	addOperandFlag(cmd, key)
	addClientFlags(cmd, &f)
	return cmd
}

func newDelCmd() *cobra.Command {
	var f clientFlags
	var available bool
	key := keyOperand()
	cmd := &cobra.Command{
		Use:     "del KEY",
		Aliases: []string{"delete"},
		Short:   "Delete KEY; prints 1 if it existed, 0 if not",
		Long: "Delete KEY; prints 1 if it existed, 0 if not. --key-file takes KEY from a file instead, byte for byte.\n" +
			"With --available (see put --available) it prints OK, or that the delete is held as tentative.",
		Args: cobra.ArbitraryArgs, // readOperands checks the count, as the file flags leave it
		RunE: func(cmd *cobra.Command, args []string) error {
			k, err := readOperands("del", args, []*operand{key}, cmd.InOrStdin())
			if err != nil {
				return err
			}
			c, ctx, done, err := f.connect()
			if err != nil {
				return err
			}
			defer done()
			if available {
				heldBy, err := c.DeleteAvailableHeldBy(ctx, k[0])
				if err != nil {
					return err
				}
				return printAvailableWrite(cmd, f.output == "json", k[0], heldBy)
			}
			existed, err := c.Delete(ctx, k[0])
			if err != nil {
				return err
			}
			if f.output == "json" {
				return printJSON(cmd.OutOrStdout(), delJSON(k[0], existed))
			}
			n := 0
			if existed {
				n = 1
			}
			fmt.Fprintln(cmd.OutOrStdout(), strconv.Itoa(n))
			return nil
		},
	}
	cmd.Flags().BoolVar(&available, "available", false, "available mode: if the shard has no quorum, the node reached holds the delete as tentative and reconciles it later (last writer wins)")
	addOperandFlag(cmd, key)
	addClientFlags(cmd, &f)
	return cmd
}

func newCasCmd() *cobra.Command {
	var f clientFlags
	var absent, del bool
	key, old, value := keyOperand(), valueOperand("OLD", "old-file"), valueOperand("NEW", "value-file")
	cmd := &cobra.Command{
		Use:   "cas KEY OLD NEW",
		Short: "Set KEY to NEW if it holds OLD (exit status 1 if it does not)",
		Long: "Compare-and-swap. With --absent the expected state is \"no such key\" and OLD is omitted:\n" +
			"  concord cas KEY NEW --absent\n" +
			"With --delete the key is deleted on a match and NEW is omitted:\n" +
			"  concord cas KEY OLD --delete\n" +
			"--key-file, --old-file and --value-file take KEY, OLD and NEW from files instead, byte for byte.",
		Args: cobra.ArbitraryArgs, // readOperands checks the count, as the file flags leave it
		RunE: func(cmd *cobra.Command, args []string) error {
			old.omit, value.omit = absent, del
			k, cas, err := casArgs(args, key, old, value, cmd.InOrStdin())
			if err != nil {
				return err
			}
			c, ctx, done, err := f.connect()
			if err != nil {
				return err
			}
			defer done()
			res, err := c.CompareAndSwap(ctx, k, cas)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			switch {
			case f.output == "json":
				err = printJSON(out, casJSON(k, res))
			case res.Swapped:
				fmt.Fprintln(out, "OK")
			case res.CurrentExists:
				fmt.Fprintf(out, "FAILED: current value is %q\n", res.CurrentValue)
			default:
				fmt.Fprintln(out, "FAILED: key does not exist")
			}
			if err == nil && !res.Swapped {
				return ExitError{Code: 1}
			}
			return err
		},
	}
	cmd.Flags().BoolVar(&absent, "absent", false, "expect the key not to exist (omit OLD)")
	cmd.Flags().BoolVar(&del, "delete", false, "delete the key on a match (omit NEW)")
	for _, op := range []*operand{key, old, value} {
		addOperandFlag(cmd, op)
	}
	addClientFlags(cmd, &f)
	return cmd
}

// casArgs reads cas's key and its OLD and NEW (old.omit: --absent,
// value.omit: --delete) from args and files.
func casArgs(args []string, key, old, value *operand, stdin io.Reader) ([]byte, client.CAS, error) {
	switch {
	case old.omit && old.path != "":
		return nil, client.CAS{}, errors.New("--old-file gives OLD, which --absent leaves out: use one of them")
	case value.omit && value.path != "":
		return nil, client.CAS{}, errors.New("--value-file gives NEW, which --delete leaves out: use one of them")
	}
	ops, err := readOperands("cas", args, []*operand{key, old, value}, stdin)
	if err != nil {
		return nil, client.CAS{}, err
	}
	return ops[0], client.CAS{ExpectAbsent: old.omit, Delete: value.omit, Expected: ops[1], Value: ops[2]}, nil
}

func newScanCmd() *cobra.Command {
	var f clientFlags
	var limit int
	var stale bool
	cmd := &cobra.Command{
		Use:   "scan [START [END]]",
		Short: "Print keys in [START, END) in byte order, one \"key<TAB>value\" per line",
		Args:  argCount(cobra.MaximumNArgs(2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if limit < 0 {
				// The client reads a limit below 1 as "all keys": -5 printed them all.
				return fmt.Errorf("--limit must not be negative (0: all keys), got %d", limit)
			}
			var start, end []byte
			if len(args) > 0 {
				start = []byte(args[0])
			}
			if len(args) > 1 {
				end = []byte(args[1])
			}
			c, ctx, done, err := f.connect()
			if err != nil {
				return err
			}
			defer done()
			var opts []client.ReadOption
			if stale {
				opts = append(opts, client.Stale())
			}
			kvs, err := c.Scan(ctx, start, end, limit, opts...)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if f.output == "json" {
				return printJSON(out, scanJSON(kvs))
			}
			for _, kv := range kvs {
				fmt.Fprintf(out, "%s\t%s\n", kv.Key, kv.Value)
			}
			return nil
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 0, "at most this many keys (0: all)")
	cmd.Flags().BoolVar(&stale, "stale", false, "read replicas without confirming leadership (may be behind)")
	addClientFlags(cmd, &f)
	return cmd
}
