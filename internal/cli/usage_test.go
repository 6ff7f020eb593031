package cli

import (
	"bytes"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/concord-kv/concord/internal/node"
)

// runCLI executes the command line in-process and returns its error and what
// it printed on standard output.
func runCLI(args ...string) (string, error) {
	root := NewRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	_, err := root.ExecuteC()
	return out.String(), err
}

// TestUnknownSubcommandFails: a word that is none of a group's subcommands
// is an error with exit status 2, as on the root (before: the group printed
// its help and exited 0, so `concord node join x` read as a success); the
// group alone still prints its help.
func TestUnknownSubcommandFails(t *testing.T) {
	for _, args := range [][]string{
		{"node", "join", "x"}, {"shard", "lsit"}, {"cluster", "down"}, {"leader", "move"}, {"fault", "crash", "a:1"},
	} {
		_, err := runCLI(args...)
		want := `unknown command "` + args[1] + `" for "concord ` + args[0] + `"`
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("concord %s: err = %v, want %q", strings.Join(args, " "), err, want)
		}
		if code := Main(args); code != 2 {
			t.Errorf("concord %s exited %d, want 2", strings.Join(args, " "), code)
		}
	}
	out, err := runCLI("node")
	if err != nil || !strings.Contains(out, "Available Commands") {
		t.Errorf("concord node: err = %v, output %q; want its help", err, out)
	}
}

// countingListener is a server on 127.0.0.1 that counts the connections
// made to it and closes each at once.
func countingListener(t *testing.T) (string, *atomic.Int64) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	var n atomic.Int64
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			c.Close()
		}
	}()
	return lis.Addr().String(), &n
}

// TestBadClientFlagsRefusedBeforeDialing: flags no run can honour fail
// with an error naming the flag, before anything is dialed (before: a
// --timeout of 0 failed as "no node answered ... (last error: no node
// known)", blaming the cluster; --limit -5 scanned every key; --clients
// 1000000000 allocated until the machine ran out of memory; --conns past
// --clients dialed connection sets no goroutine used).
func TestBadClientFlagsRefusedBeforeDialing(t *testing.T) {
	addr, dialed := countingListener(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"get", "k", "--timeout", "0"}, "--timeout must be positive, got 0s"},
		{[]string{"put", "k", "v", "--timeout", "-1s"}, "--timeout must be positive, got -1s"},
		{[]string{"status", "--timeout", "0"}, "--timeout must be positive"},
		{[]string{"scan", "--limit", "-5", "--timeout", "2s"}, "--limit must not be negative (0: all keys), got -5"},
		{[]string{"bench", "--timeout", "0", "--duration", "1s"}, "--timeout must be positive"},
		{[]string{"bench", "--clients", "1000000000", "--timeout", "2s", "--duration", "1s"}, "--clients must be at most 10000, got 1000000000"},
		{[]string{"bench", "--clients", "2", "--conns", "5", "--timeout", "2s", "--duration", "1s"}, "--conns (5) must not exceed --clients (2)"},
		{[]string{"backup", t.TempDir(), "--timeout", "2s"}, "it is a directory; name a file"},
		{[]string{"backup", "", "--timeout", "2s"}, "backup FILE is empty"},
		{[]string{"put", "k", "v", "--available", "--ttl", "1s", "--timeout", "2s"}, "--available takes a plain put: not with --ttl or --prev"},
		{[]string{"put", "k", "v", "--available", "--prev", "--timeout", "2s"}, "--available takes a plain put: not with --ttl or --prev"},
		{[]string{"get", "k", "--available", "--stale", "--timeout", "2s"}, "--stale and --available are exclusive"},
	} {
		_, err := runCLI(append(tc.args, "--endpoints", addr)...)
		if err == nil || !strings.Contains(errorText(err), tc.want) {
			t.Errorf("concord %s: err = %v, want %q", strings.Join(tc.args, " "), err, tc.want)
		}
		if n := dialed.Swap(0); n != 0 {
			t.Errorf("concord %s: %d connections made before the flags were refused", strings.Join(tc.args, " "), n)
		}
	}
}

// TestBackupRefusesExistingFile: `backup FILE` where FILE exists fails
// naming it, before anything is dialed, and leaves it as it was (before:
// the finished backup was renamed over it without a word); with --force
// it goes ahead, and a backup that then fails (here: no node answers)
// still leaves the old file whole, as it only renames a complete one in.
func TestBackupRefusesExistingFile(t *testing.T) {
	addr, dialed := countingListener(t)
	path := filepath.Join(t.TempDir(), "cluster.bak")
	old := []byte("the only good backup")
	if err := os.WriteFile(path, old, 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"backup", path, "--endpoints", addr, "--timeout", "2s"}
	var out bytes.Buffer
	code := run(args, &out, &out)
	if want := "backup " + path + ": the file exists; name another, or give --force to replace it"; code != 2 || !strings.Contains(out.String(), want) {
		t.Errorf("backup onto an existing file: exit %d, output %q; want exit 2 and %q", code, out.String(), want)
	}
	if n := dialed.Swap(0); n != 0 {
		t.Errorf("backup onto an existing file: %d connections made before it was refused", n)
	}
	if _, err := runCLI(append(args, "--force")...); err == nil || strings.Contains(err.Error(), "file exists") {
		t.Errorf("backup --force against a listener that answers nothing: err = %v, want a failure to reach the cluster", err)
	}
	if dialed.Load() == 0 {
		t.Errorf("backup --force did not try the cluster")
	}
	if got, err := os.ReadFile(path); err != nil || !bytes.Equal(got, old) {
		t.Errorf("after a failed backup --force the file holds %q (err %v), want the old %q", got, err, old)
	}
	if m, _ := filepath.Glob(path + ".partial-*"); len(m) != 0 {
		t.Errorf("a failed backup left partial files: %v", m)
	}
}

// TestServerRefusesUnreachableAddr: a node address with port 0 or past
// 65535 fails the start with an error naming the flag, before the data dir
// is created (before: --addr 127.0.0.1:0 bootstrapped a cluster whose only
// node was named 127.0.0.1:0, which no one can dial; --peers with port
// 70000 waited for ever for that peer).
func TestServerRefusesUnreachableAddr(t *testing.T) {
	free := freeAddr(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--addr", "127.0.0.1:0"}, `--addr "127.0.0.1:0": the port must be between 1 and 65535`},
		{[]string{"--addr", free, "--peers", free + ",127.0.0.1:70000"}, `--peers "127.0.0.1:70000": the port must be between 1 and 65535`},
		{[]string{"--addr", free, "--join", "127.0.0.1:0"}, `--join "127.0.0.1:0": the port must be between 1 and 65535`},
		{[]string{"--addr", free, "--available-timeout", "0s"}, `--available-timeout must be positive`},
		{[]string{"--addr", free, "--max-hint-bytes", "-1"}, `--max-hint-bytes must be a number of bytes`},
		{[]string{"--addr", free, "--learner-timeout", "0s"}, `--learner-timeout must be positive`},
		{[]string{"--addr", free, "--learner-timeout", "-1m"}, `--learner-timeout must be at least 10s`},
		{[]string{"--addr", free, "--learner-timeout", "9s"}, `--learner-timeout must be at least 10s`},
	} {
		dir := filepath.Join(t.TempDir(), "data")
		err := runServerFor(t, append([]string{"server", "--data-dir", dir, "--log-level", "error"}, tc.args...))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("concord server %s: err = %v, want %q", strings.Join(tc.args, " "), err, tc.want)
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("concord server %s: the data dir was created (stat: %v)", strings.Join(tc.args, " "), err)
		}
	}
}

// TestServerLearnerTimeoutFlag: --learner-timeout reaches the node's
// configuration (node.Config.LearnerTimeout, which the scheduler's
// settings take: internal/node's TestLearnerTimeoutReachesScheduler),
// from the command line or a config file; without it, 30 min.
func TestServerLearnerTimeoutFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want time.Duration
	}{
		{nil, 30 * time.Minute},
		{[]string{"--learner-timeout", "5m"}, 5 * time.Minute},
		{[]string{"--config", writeConfig(t, "learner-timeout: 2h\n")}, 2 * time.Hour},
	} {
		var got node.Config
		cmd := withSettings(serverCmd(func(c node.Config) error { got = c; return nil }))
		cmd.SetArgs(append([]string{"--log-level", "error"}, tc.args...))
		if err := cmd.Execute(); err != nil {
			t.Fatalf("server %v: %v", tc.args, err)
		}
		if got.LearnerTimeout != tc.want {
			t.Errorf("server %v: LearnerTimeout %v, want %v", tc.args, got.LearnerTimeout, tc.want)
		}
	}
}

// TestMaxConcurrentStreamsRefusesNoBound: --max-concurrent-streams 0 or
// less, or past what HTTP/2 can announce, is refused naming the flag
// before a data dir is created; 0 must not slip through as grpc-go's
// "unlimited" (or node.Config's "the default").
func TestMaxConcurrentStreamsRefusesNoBound(t *testing.T) {
	free := freeAddr(t)
	for _, tc := range []struct {
		value, want string
	}{
		{"0", "--max-concurrent-streams must be at least 1 (the gRPC calls one client connection may have open at once; calls past it wait for one to end), got 0"},
		{"-3", "--max-concurrent-streams must be at least 1"},
		{"4294967296", "--max-concurrent-streams must be between 1 and 4294967295"},
	} {
		dir := filepath.Join(t.TempDir(), "data")
		args := []string{"server", "--addr", free, "--data-dir", dir, "--log-level", "error", "--max-concurrent-streams", tc.value}
		err := runServerFor(t, args)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("concord %s: err = %v, want %q", strings.Join(args, " "), err, tc.want)
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("concord %s: the data dir was created (stat: %v)", strings.Join(args, " "), err)
		}
	}
}

// TestZeroCountsRefused: --shards, --replicas, --max-key-bytes and
// --max-value-bytes given as 0 or less are refused naming the flag, exit
// status 2, before a data dir is created or a node started, 0 with the
// same error as a negative count (before: node.Config and localcluster
// read 0 as "the default", so --shards 0 started 16 shards, --replicas 0
// three replicas and --max-key-bytes 0 took keys of 4096 bytes without a
// word).
func TestZeroCountsRefused(t *testing.T) {
	free := freeAddr(t)
	for _, tc := range []struct {
		flag, value, want string
	}{
		{"--shards", "0", "--shards must be at least 1, got 0"},
		{"--replicas", "0", "--replicas must be at least 1, got 0"},
		{"--replicas", "-2", "--replicas must be at least 1, got -2"},
		{"--max-key-bytes", "0", "--max-key-bytes must be at least 1, got 0"},
		{"--max-key-bytes", "-5", "--max-key-bytes must be at least 1, got -5"},
		{"--max-value-bytes", "0", "--max-value-bytes must be at least 1, got 0"},
		{"--max-value-bytes", "-5", "--max-value-bytes must be at least 1, got -5"},
	} {
		dir := filepath.Join(t.TempDir(), "data")
		err := runServerFor(t, []string{"server", "--addr", free, "--data-dir", dir, "--log-level", "error", tc.flag, tc.value})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("concord server %s %s: err = %v, want %q", tc.flag, tc.value, err, tc.want)
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("concord server %s %s: the data dir was created (stat: %v)", tc.flag, tc.value, err)
		}
		if tc.flag != "--shards" && tc.flag != "--replicas" {
			continue // a node flag `cluster up` does not take
		}
		// --nodes 0: were the count not checked first, the launcher
		// refuses it (another error) rather than start nodes.
		args := []string{"cluster", "up", "--nodes", "0", "--data-dir", dir, tc.flag, tc.value}
		var out bytes.Buffer
		if code := run(args, &out, &out); code != 2 || !strings.Contains(out.String(), tc.want) {
			t.Errorf("concord %s: exit %d, output %q; want exit 2 and %q", strings.Join(args, " "), code, out.String(), tc.want)
		}
	}
}

// TestFailedStartRemovesDataDirItCreated: a server whose start fails (its
// address is in use) removes the data dir it created, parents included,
// so the dir does not pass for a node's (before: it left an empty
// database there, which `concord restore --data-dir` then refused as "not
// empty"); a data dir that existed before is left, whatever it holds.
func TestFailedStartRemovesDataDirItCreated(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	start := func(dir string) {
		t.Helper()
		err := runServerFor(t, []string{"server", "--addr", busy.Addr().String(), "--data-dir", dir, "--log-level", "error"})
		if err == nil || !strings.Contains(err.Error(), "address already in use") {
			t.Fatalf("server on a busy address: err = %v, want address already in use", err)
		}
	}
	parent := filepath.Join(t.TempDir(), "new")
	start(filepath.Join(parent, "data"))
	if _, err := os.Stat(parent); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the failed start left the dirs it created (stat %s: %v)", parent, err)
	}
	existing := t.TempDir()
	keep := filepath.Join(existing, "operator-file")
	if err := os.WriteFile(keep, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	start(existing)
	if _, err := os.Stat(keep); err != nil {
		t.Errorf("the failed start touched a data dir that existed before: %v", err)
	}
	empty := t.TempDir()
	start(empty)
	if _, err := os.Stat(empty); err != nil {
		t.Errorf("the failed start removed an empty data dir that existed before: %v", err)
	}
}

// runServerFor runs `concord server` in-process and returns its error; a
// server that is still running after a while started (the defect): it is
// stopped with SIGINT, which runServer takes as its signal to stop.
func runServerFor(t *testing.T, args []string) error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := runCLI(args...)
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(os.Getpid(), syscall.SIGINT)
		<-done
		return errors.New("the server started")
	}
}

// TestHTTPPortAsEndpointHint: an endpoint that answers HTTP/1.1 (a node's
// --http-addr given as --endpoints) gets an error that says so, not the
// hint to turn TLS on, which could not help.
func TestHTTPPortAsEndpointHint(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	_, err := runCLI("get", "k", "--endpoints", srv.Listener.Addr().String(), "--timeout", "2s")
	if err == nil || !strings.Contains(err.Error(), "is it a node's --http-addr?") || strings.Contains(err.Error(), "TLS") {
		t.Fatalf("get against an HTTP server: err = %v, want the hint that it is an HTTP port, not one about TLS", err)
	}
}

// TestFaultDiskLowArgsRefusedBeforeDialing: disk-low takes an address and
// on or off; any other word (a "true", an "ON") is refused naming it, and
// nothing is dialed, rather than being read as off.
func TestFaultDiskLowArgsRefusedBeforeDialing(t *testing.T) {
	addr, dialed := countingListener(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"fault", "disk-low", addr, "true"}, `disk-low takes on or off after the address, not "true"`},
		{[]string{"fault", "disk-low", addr, "ON"}, `disk-low takes on or off after the address, not "ON"`},
		{[]string{"fault", "disk-low", addr}, "fault disk-low takes ADDR on|off (got 1 argument)"},
		{[]string{"fault", "disk-low", addr, "on", "off"}, "fault disk-low takes ADDR on|off (got 3 arguments)"},
	} {
		_, err := runCLI(tc.args...)
		if err == nil || !strings.Contains(errorText(err), tc.want) {
			t.Errorf("concord %s: err = %v, want %q", strings.Join(tc.args, " "), err, tc.want)
		}
		if n := dialed.Swap(0); n != 0 {
			t.Errorf("concord %s: %d connections made before the arguments were refused", strings.Join(tc.args, " "), n)
		}
	}
}

// TestArgumentCountsWorded: a wrong number of arguments is refused in the
// CLI's own words, "VERB takes ARGS (got N arguments)" with the arguments
// as the usage line names them and "argument" singular for one, for every
// command (before: get, del, scan and the commands with a fixed count
// answered cobra's "accepts at most 1 arg(s), received 2", and put said
// "got 1 arguments"); nothing is dialed first.
func TestArgumentCountsWorded(t *testing.T) {
	addr, dialed := countingListener(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"get", "a", "b", "--endpoints", addr}, "get takes KEY (got 2 arguments)"},
		{[]string{"get", "--endpoints", addr}, "get takes KEY (got 0 arguments)"},
		{[]string{"del", "a", "b", "--endpoints", addr}, "del takes KEY (got 2 arguments)"},
		{[]string{"put", "k", "--endpoints", addr}, "put takes KEY VALUE (got 1 argument)"},
		{[]string{"put", "k", "v", "w", "--endpoints", addr}, "put takes KEY VALUE (got 3 arguments)"},
		{[]string{"cas", "k", "a", "b", "c", "--endpoints", addr}, "cas takes KEY OLD NEW (got 4 arguments)"},
		{[]string{"scan", "a", "b", "c", "--endpoints", addr}, "scan takes [START [END]] (got 3 arguments)"},
		{[]string{"status", "x", "--endpoints", addr}, "status takes no arguments (got 1 argument)"},
		{[]string{"node", "remove", "--endpoints", addr}, "node remove takes ID (got 0 arguments)"},
		{[]string{"leader", "transfer", "1", "--endpoints", addr}, "leader transfer takes SHARD NODE (got 1 argument)"},
		{[]string{"fault", "partition"}, "fault partition takes ADDR [REACHABLE...] (got 0 arguments)"},
		{[]string{"restore", "a", "b", "--data-dir", filepath.Join(t.TempDir(), "d")}, "restore takes FILE (got 2 arguments)"},
	} {
		_, err := runCLI(tc.args...)
		if err == nil || errorText(err) != tc.want {
			t.Errorf("concord %s: err = %v, want %q", strings.Join(tc.args, " "), err, tc.want)
		}
		if n := dialed.Swap(0); n != 0 {
			t.Errorf("concord %s: %d connections made before the arguments were refused", strings.Join(tc.args, " "), n)
		}
	}
}

// freeAddr returns a 127.0.0.1 address whose port the OS just handed out
// and that nothing listens on now: free for a node to listen on, had it
// started.
func freeAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	return lis.Addr().String()
}

// TestFaultInjectionHelpNamesEveryFault: `concord server --help` says
// which faults --enable-fault-injection lets through, every `concord
// fault` subcommand (disk-low was left out).
func TestFaultInjectionHelpNamesEveryFault(t *testing.T) {
	out, err := runCLI("server", "--help")
	if err != nil {
		t.Fatal(err)
	}
	var line string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "--enable-fault-injection") {
			line = l
		}
	}
	if line == "" {
		t.Fatalf("server --help has no --enable-fault-injection line:\n%s", out)
	}
	fault, _, err := NewRoot().Find([]string{"fault"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range fault.Commands() {
		if name := c.Name(); name != "help" && name != "completion" && !strings.Contains(line, name) {
			t.Errorf("--enable-fault-injection's help does not name `fault %s`: %q", name, line)
		}
	}
}
