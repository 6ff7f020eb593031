// Package kv739 tests lib739kv, the CS739 C client library, against a live
// cluster: a C program (kv739/test/kv739_test.c) built with
// AddressSanitizer, and a Python ctypes program with multiprocessing.
package kv739

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/concord-kv/concord/internal/testcluster"
	"github.com/concord-kv/concord/internal/version"
)

func TestMain(m *testing.M) { testcluster.Main(m) }

// build compiles the library (and, given test, the C test program
// kv739/test/<test>.c against it, linked with the extra flags too) into dir
// with the extra compiler flags.
func build(t *testing.T, dir string, flags []string, test string, linkFlags ...string) {
	t.Helper()
	root, err := testcluster.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	lib := append([]string{"-O1", "-g", "-Wall", "-Wextra", "-Werror", "-std=c11", "-fPIC", "-fvisibility=hidden", "-shared",
		"-o", filepath.Join(dir, "lib739kv.so"),
		filepath.Join(root, "kv739/kv739.c"), filepath.Join(root, "kv739/conn.c"), "-lpthread"}, flags...)
	run(t, "gcc", lib...)
	if test != "" {
		prog := append([]string{"-g", "-Wall", "-Wextra", "-Werror", "-std=c11", "-I", filepath.Join(root, "include"),
			filepath.Join(root, "kv739/test", test+".c"), "-L", dir, "-l739kv", "-Wl,-rpath," + dir, "-lpthread",
			"-o", filepath.Join(dir, test)}, append(flags, linkFlags...)...)
		run(t, "gcc", prog...)
	}
}

func run(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// TestCLibrary runs the C test program under AddressSanitizer (leaks
// included) against a supervised 3-node cluster with fault injection: every
// return code and validation case, 8 threads, fork, 1,000 init/shutdown
// cycles, a put whose answer a proxy drops (it must apply once), partition
// and heal, clean and unclean deaths, and durability across a restart of
// every server.
func TestCLibrary(t *testing.T) {
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc not found")
	}
	dir := t.TempDir()
	build(t, dir, []string{"-fsanitize=address"}, "kv739_test")
	c := testcluster.New(t, testcluster.Options{Nodes: 3, FaultInjection: true, Supervise: true, HTTP: true})
	c.WaitReady(t, 60*time.Second)
	// The available profile's check cuts every server off: a node holds a
	// write only once it knows the cluster's version allows it, which a
	// fresh cluster raises by heartbeats a moment after it is ready.
	c.WaitClusterVersion(t, version.Versions, 60*time.Second)
	p := startDropProxy(t, c.Addr(0))

	cmd := exec.Command(filepath.Join(dir, "kv739_test"), append([]string{p.addr}, c.Endpoints()...)...)
	cmd.Env = append(os.Environ(), "KV739_TIMEOUT_MS=60000", "ASAN_OPTIONS=detect_leaks=1:abort_on_error=0")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil || !strings.HasSuffix(strings.TrimSpace(out.String()), "OK") {
		t.Fatalf("kv739_test: %v\n%s", err, out.String())
	}
	if !p.dropped() {
		t.Fatalf("the proxy never dropped an answer: the retried-put check did not run")
	}
	t.Logf("kv739_test: %s", strings.TrimSpace(out.String()))
}

// TestCHostile runs kv739/test/kv739_hostile_test.c under AddressSanitizer
// (leaks included) against the fake RESP servers it starts itself:
// malformed, huge, truncated, split and nested replies; servers that never
// answer, answer half a reply or a byte at a time (every call returns
// within its deadline); servers that are down; die's answer when a server
// is silent; a forked child that reuses the inherited descriptors; a
// slow name lookup of a learned member that must not stall other threads;
// and 8 threads calling while the main thread initialises and shuts the
// library down under them. It runs again built with ThreadSanitizer.
// -rdynamic lets the program's getaddrinfo stand in for libc's.
func TestCHostile(t *testing.T) {
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc not found")
	}
	for _, sanitizer := range []string{"address", "thread"} {
		t.Run(sanitizer, func(t *testing.T) {
			dir := t.TempDir()
			build(t, dir, []string{"-fsanitize=" + sanitizer}, "kv739_hostile_test", "-rdynamic", "-ldl")
			cmd := exec.Command(filepath.Join(dir, "kv739_hostile_test"))
			cmd.Env = append(os.Environ(), "ASAN_OPTIONS=detect_leaks=1:abort_on_error=0", "TSAN_OPTIONS=halt_on_error=1")
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.HasSuffix(strings.TrimSpace(string(out)), "OK") {
				t.Fatalf("kv739_hostile_test (-fsanitize=%s): %v\n%s", sanitizer, err, out)
			}
		})
	}
}

// TestPythonFork loads the library with ctypes and uses it from processes
// forked by multiprocessing after the parent had used it.
func TestPythonFork(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 not found")
	}
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc not found")
	}
	dir := t.TempDir()
	build(t, dir, nil, "")
	c := testcluster.New(t, testcluster.Options{Nodes: 3})
	c.WaitReady(t, 60*time.Second)
	root, _ := testcluster.ModuleRoot()
	cmd := exec.Command("python3", append([]string{filepath.Join(root, "tests/kv739/kv739_test.py"), filepath.Join(dir, "lib739kv.so")}, c.Endpoints()...)...)
	cmd.Env = append(os.Environ(), "KV739_TIMEOUT_MS=60000")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.HasSuffix(strings.TrimSpace(string(out)), "OK") {
		t.Fatalf("kv739_test.py: %v\n%s", err, out)
	}
	t.Logf("kv739_test.py: %s", strings.TrimSpace(string(out)))
}

// dropProxy relays RESP between clients and one node, request by request,
// except that it forwards the first CONCORD.SESSION command it sees, waits
// for the node's answer, and closes the client's connection instead of
// relaying it: a put applied whose answer was lost.
type dropProxy struct {
	addr string
	mu   sync.Mutex
	done bool
}

func startDropProxy(t *testing.T, upstream string) *dropProxy {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &dropProxy{addr: l.Addr().String()}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go p.serve(c, upstream)
		}
	}()
	return p
}

func (p *dropProxy) dropped() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

func (p *dropProxy) serve(c net.Conn, upstream string) {
	defer c.Close()
	u, err := net.Dial("tcp", upstream)
	if err != nil {
		return
	}
	defer u.Close()
	cr, ur := bufio.NewReader(c), bufio.NewReader(u)
	for {
		req, err := readReply(cr) // a request is a RESP array too
		if err != nil {
			return
		}
		if _, err := u.Write(req); err != nil {
			return
		}
		resp, err := readReply(ur)
		if err != nil {
			return
		}
		p.mu.Lock()
		drop := !p.done && bytes.Contains(req, []byte("CONCORD.SESSION"))
		p.done = p.done || drop
		p.mu.Unlock()
		if drop {
			return // the node applied it; the client never hears
		}
		if _, err := c.Write(resp); err != nil {
			return
		}
	}
}

// readReply reads one whole RESP value and returns its bytes.
func readReply(r *bufio.Reader) ([]byte, error) {
	line, err := r.ReadBytes('\n')
	if err != nil {
		return nil, err
	}
	if len(line) < 3 {
		return nil, errors.New("short line")
	}
	out := line
	n, _ := strconv.Atoi(string(bytes.TrimSpace(line[1:])))
	switch line[0] {
	case '$':
		if n >= 0 {
			body := make([]byte, n+2)
			if _, err := io.ReadFull(r, body); err != nil {
				return nil, err
			}
			out = append(out, body...)
		}
	case '*':
		for range max(n, 0) {
			e, err := readReply(r)
			if err != nil {
				return nil, err
			}
			out = append(out, e...)
		}
	}
	return out, nil
}
