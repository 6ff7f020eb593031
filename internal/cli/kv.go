package cli

import (
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/concord-kv/concord/client"
)

func newPutCmd() *cobra.Command {
	var f clientFlags
	var ttl time.Duration
	var prev bool
	cmd := &cobra.Command{
		Use:   "put KEY VALUE",
		Short: "Store VALUE under KEY",
		Long: "Store VALUE under KEY, removing any expiry the key had. With --ttl the key expires that long\n" +
			"after the put applies (e.g. --ttl 10s, --ttl 1h30m): it then reads as absent and is deleted.\n" +
			"With --prev it prints the value KEY had before (\"(none)\" if it had none) instead of OK;\n" +
			"without it the put is a blind write, which the shard applies without reading the key.",
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("ttl") && ttl <= 0 {
				return fmt.Errorf("--ttl must be positive, got %v", ttl)
			}
			c, ctx, done, err := f.connect()
			if err != nil {
				return err
			}
			defer done()
			var opts []client.PutOption
			if ttl > 0 {
				opts = append(opts, client.TTL(ttl))
			}
			if prev {
				opts = append(opts, client.ReturnPrev())
			}
			old, existed, err := c.Put(ctx, []byte(args[0]), []byte(args[1]), opts...)
			if err != nil {
				return err
			}
			return printPut(cmd, f.output == "json", prev, old, existed)
		},
	}
	cmd.Flags().DurationVar(&ttl, "ttl", 0, "time to live (e.g. 10s); none by default")
	cmd.Flags().BoolVar(&prev, "prev", false, "print the previous value (the shard then reads the key before writing it)")
	addClientFlags(cmd, &f)
	return cmd
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
	var stale bool
	cmd := &cobra.Command{
		Use:   "get KEY",
		Short: "Print the value of KEY (exit status 1 if it does not exist)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ctx, done, err := f.connect()
			if err != nil {
				return err
			}
			defer done()
			var opts []client.ReadOption
			if stale {
				opts = append(opts, client.Stale())
			}
			v, expireAt, found, err := c.GetWithExpiry(ctx, []byte(args[0]), opts...)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			switch {
			case f.output == "json":
				if err := printJSON(out, getJSON([]byte(args[0]), v, found, expireAt)); err != nil {
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
	addClientFlags(cmd, &f)
	return cmd
}

func newDelCmd() *cobra.Command {
	var f clientFlags
	cmd := &cobra.Command{
		Use:   "del KEY",
		Short: "Delete KEY; prints 1 if it existed, 0 if not",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ctx, done, err := f.connect()
			if err != nil {
				return err
			}
			defer done()
			existed, err := c.Delete(ctx, []byte(args[0]))
			if err != nil {
				return err
			}
			if f.output == "json" {
				return printJSON(cmd.OutOrStdout(), delJSON([]byte(args[0]), existed))
			}
			n := 0
			if existed {
				n = 1
			}
			fmt.Fprintln(cmd.OutOrStdout(), strconv.Itoa(n))
			return nil
		},
	}
	addClientFlags(cmd, &f)
	return cmd
}

func newCasCmd() *cobra.Command {
	var f clientFlags
	var absent, del bool
	cmd := &cobra.Command{
		Use:   "cas KEY OLD NEW",
		Short: "Set KEY to NEW if it holds OLD (exit status 1 if it does not)",
		Long: "Compare-and-swap. With --absent the expected state is \"no such key\" and OLD is omitted:\n" +
			"  concord cas KEY NEW --absent\n" +
			"With --delete the key is deleted on a match and NEW is omitted:\n" +
			"  concord cas KEY OLD --delete",
		Args: cobra.RangeArgs(1, 3),
		RunE: func(cmd *cobra.Command, args []string) error {
			cas, err := casArgs(args, absent, del)
			if err != nil {
				return err
			}
			c, ctx, done, err := f.connect()
			if err != nil {
				return err
			}
			defer done()
			res, err := c.CompareAndSwap(ctx, []byte(args[0]), cas)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			switch {
			case f.output == "json":
				err = printJSON(out, casJSON([]byte(args[0]), res))
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
	addClientFlags(cmd, &f)
	return cmd
}

func casArgs(args []string, absent, del bool) (client.CAS, error) {
	want := 3
	if absent {
		want--
	}
	if del {
		want--
	}
	if len(args) != want {
		return client.CAS{}, fmt.Errorf("cas takes KEY%s%s (got %d arguments)",
			map[bool]string{false: " OLD", true: ""}[absent], map[bool]string{false: " NEW", true: ""}[del], len(args))
	}
	cas := client.CAS{ExpectAbsent: absent, Delete: del}
	rest := args[1:]
	if !absent {
		cas.Expected, rest = []byte(rest[0]), rest[1:]
	}
	if !del {
		cas.Value = []byte(rest[0])
	}
	return cas, nil
}

func newScanCmd() *cobra.Command {
	var f clientFlags
	var limit int
	var stale bool
	cmd := &cobra.Command{
		Use:   "scan [START [END]]",
		Short: "Print keys in [START, END) in byte order, one \"key<TAB>value\" per line",
		Args:  cobra.MaximumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
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
