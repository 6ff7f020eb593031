package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/concord-kv/concord/client"
	"github.com/concord-kv/concord/internal/bench"
)

type benchFlags struct {
	cfg       bench.Config
	endpoints string
	output    string
	plot      string
	timeout   time.Duration
	wire      string
	sec       securityFlags
	// cpuProfile, when set, is where the measured phase's CPU profile of
	// the load generator itself goes (hidden: for tuning the client).
	cpuProfile string
}

func newBenchCmd() *cobra.Command {
	var f benchFlags
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Generate load against a cluster and report throughput and latency",
		Long: "Run a YCSB-style load: --clients goroutines sharing --conns clients issue the operations of\n" +
			"--workload (or reads and updates by --read-ratio) on --keys keys drawn by --distribution, for\n" +
			"--duration or --ops, against Concord, etcd or Redis (--target), the same load for each.\n" +
			"Examples:\n  concord bench --workload a --clients 16 --duration 15s --output json\n" +
			"  concord bench --target etcd --endpoints 127.0.0.1:2379 --workload put --clients 100 --conns 10",
		Args: argCount(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := f.resolve(cmd); err != nil {
				return err
			}
			return runBench(cmd, f)
		},
	}
	addBenchFlags(cmd, &f)
	return cmd
}

func addBenchFlags(cmd *cobra.Command, f *benchFlags) {
	def := os.Getenv("CONCORD_ENDPOINTS")
	if def == "" {
		def = "127.0.0.1:7001"
	}
	fl := cmd.Flags()
	c := &f.cfg
	fl.StringVar(&f.endpoints, "endpoints", def, "comma-separated node addresses (env CONCORD_ENDPOINTS)")
	fl.StringVar(&c.Target, "target", "concord", "system to load: concord, etcd (Go client v3) or redis (go-redis; one endpoint)")
	fl.StringVar(&c.Workload, "workload", "a", "YCSB a (50% read/50% update), b (95/5), c (100% read), d (95% read latest/5% insert),\n"+
		"e (95% scan/5% insert), f (50% read/50% read-modify-write), put (100% update) or get (100% read)")
	fl.Float64Var(&c.ReadRatio, "read-ratio", 0, "fraction of reads, 0..1 (overrides --workload)")
	fl.StringVar(&c.Distribution, "distribution", "", "key choice: uniform, zipfian, hotkey (90% of requests on 10% of keys) or latest\n"+
		"(default: latest for workload d, else uniform)")
	fl.IntVar(&c.Keys, "keys", 10000, "number of distinct keys")
	fl.IntVar(&c.KeySize, "key-size", 16, "key length in bytes")
	fl.IntVar(&c.ValueSize, "value-size", 256, "value length in bytes")
	fl.IntVar(&c.Clients, "clients", 16, fmt.Sprintf("concurrent goroutines issuing requests (at most %d)", bench.MaxClients))
	fl.IntVar(&c.Conns, "conns", 1, "client instances (connection sets), shared round-robin by the goroutines (at most --clients)")
	fl.DurationVar(&c.Duration, "duration", 10*time.Second, "how long to measure (unless only --ops is given)")
	fl.Int64Var(&c.Ops, "ops", 0, "total operations to run (0: run for --duration)")
	fl.StringVar(&c.Consistency, "consistency", "linearizable", "reads: linearizable or stale")
	fl.BoolVar(&c.Preload, "preload", false, "put every key once before measuring (default: on when the workload reads)")
	fl.Uint64Var(&c.Seed, "seed", 1, "random seed (key and operation choices)")
	fl.StringVarP(&f.output, "output", "o", "text", "output format: text or json")
	fl.StringVar(&f.plot, "plot", "", "also write an SVG with the latency CDF and throughput over time to this file")
	fl.DurationVar(&f.timeout, "timeout", 10*time.Second, "how long to wait for the cluster to answer at start")
	fl.StringVar(&f.wire, "wire", client.WireTCP, "--target concord: what requests travel on, tcp (the client's framed TCP wire, with\n"+
		"keepalive, falling back to gRPC with nodes that lack it; docs/architecture.md) or grpc (a KV.Stream)")
	addSecurityFlags(fl, &f.sec) // --target concord only
	fl.StringVar(&f.cpuProfile, "cpuprofile", "", "write the load generator's own CPU profile of the run (preload included) to this file")
	_ = fl.MarkHidden("cpuprofile")
}

// resolve applies the flag interactions cobra cannot express: --read-ratio
// overrides --workload, --ops alone replaces the default duration, and
// preload defaults on for workloads that read.
func (f *benchFlags) resolve(cmd *cobra.Command) error {
	c, fl := &f.cfg, cmd.Flags()
	if f.output != "text" && f.output != "json" {
		return fmt.Errorf("--output must be text or json, not %q", f.output)
	}
	if fl.Changed("read-ratio") {
		if fl.Changed("workload") {
			return errors.New("give --workload or --read-ratio, not both")
		}
		c.Workload = "custom"
	}
	if err := c.Normalize(); err != nil {
		return err
	}
	if fl.Changed("ops") && !fl.Changed("duration") {
		c.Duration = 0
	}
	if !fl.Changed("preload") {
		c.Preload = c.NeedsPreload()
	}
	opts, err := f.sec.clientOptions()
	if err != nil {
		return err
	}
	if err := checkTimeout(f.timeout); err != nil {
		return err
	}
	if f.wire != client.WireGRPC && f.wire != client.WireTCP {
		return fmt.Errorf("--wire must be %s or %s, not %q", client.WireTCP, client.WireGRPC, f.wire)
	}
	opts.Wire = f.wire
	c.Concord = opts
	for _, e := range strings.Split(f.endpoints, ",") {
		if e = strings.TrimSpace(e); e != "" {
			c.Endpoints = append(c.Endpoints, e)
		}
	}
	return c.Validate()
}

func runBench(cmd *cobra.Command, f benchFlags) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	targets, err := dialTargets(ctx, f)
	if err != nil {
		return err
	}
	defer func() {
		for _, t := range targets {
			t.Close()
		}
	}()
	stopProfile, err := startCPUProfile(f.cpuProfile)
	if err != nil {
		return err
	}
	res, err := bench.Run(ctx, f.cfg, targets, progressWriter())
	if perr := stopProfile(); err == nil && perr != nil {
		err = perr
	}
	if err != nil {
		return err
	}
	if f.plot != "" {
		if err := writePlot(f.plot, res); err != nil {
			return err
		}
	}
	if f.output == "json" {
		return res.WriteJSON(cmd.OutOrStdout())
	}
	return res.WriteText(cmd.OutOrStdout())
}

// dialTargets opens --conns clients; each waits up to --timeout for the
// cluster.
func dialTargets(ctx context.Context, f benchFlags) ([]bench.Target, error) {
	var targets []bench.Target
	perConn := (f.cfg.Clients + f.cfg.Conns - 1) / f.cfg.Conns
	for range f.cfg.Conns {
		dctx, cancel := context.WithTimeout(ctx, f.timeout)
		t, err := bench.Dial(dctx, f.cfg, perConn)
		cancel()
		if err != nil {
			for _, t := range targets {
				t.Close()
			}
			return nil, err
		}
		targets = append(targets, t)
	}
	return targets, nil
}

// progressWriter is stderr when it is a terminal, else nil (quiet): a
// redrawn line would be noise in a log or a pipe.
func progressWriter() io.Writer {
	fi, err := os.Stderr.Stat()
	if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return nil
	}
	return os.Stderr
}

// startCPUProfile profiles this process's CPU into path until the returned
// function is called; with no path it does nothing.
func startCPUProfile(path string) (stop func() error, err error) {
	if path == "" {
		return func() error { return nil }, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	return func() error {
		pprof.StopCPUProfile()
		return f.Close()
	}, nil
}

func writePlot(path string, res *bench.Result) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	return errors.Join(res.WritePlot(f), f.Close())
}
