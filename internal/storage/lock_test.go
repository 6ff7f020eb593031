package storage

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// lockChildDirEnv names the data dir the lock child (TestLockChild) holds.
const lockChildDirEnv = "CONCORD_LOCK_CHILD_DIR"

// TestLockChild is the other process of TestOpenRefusesDataDirInUse; it
// does nothing unless started by it. It opens the engine on the data dir,
// says "open", and holds it until its stdin closes.
func TestLockChild(t *testing.T) {
	dir := os.Getenv(lockChildDirEnv)
	if dir == "" {
		t.Skip("the child of TestOpenRefusesDataDirInUse")
	}
	e, err := Open(dir)
	if err != nil {
		fmt.Printf("open: %v\n", err)
		os.Exit(3)
	}
	fmt.Println("open")
	_, _ = io.Copy(io.Discard, os.Stdin)
	_ = e.Close()
	os.Exit(0)
}

// TestOpenRefusesDataDirInUse: opening a data dir another process has
// open (two nodes started on one --data-dir) fails saying the dir is in
// use by another process, not with the lock's bare "resource temporarily
// unavailable", and changes nothing there: the running engine's staged
// snapshot files in aux are left (before, the second open cleared aux
// before it failed on Pebble's lock). Once the other process closed the
// engine, the dir opens.
func TestOpenRefusesDataDirInUse(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("Pebble's lock is fcntl's")
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestLockChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), lockChildDirEnv+"="+dir)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	sc := bufio.NewScanner(out)
	if !sc.Scan() || sc.Text() != "open" {
		t.Fatalf("the child did not open the engine: %q (%v)", sc.Text(), sc.Err())
	}
	staged := filepath.Join(dir, "aux", "staged-by-the-running-node")
	if err := os.WriteFile(staged, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}

	e, err := Open(dir)
	if err == nil {
		e.Close()
		t.Fatal("a second process opened a data dir in use")
	}
	want := fmt.Sprintf("data dir %s is in use by another concord process (its lock is held)", dir)
	if !strings.Contains(err.Error(), want) {
		t.Errorf("open of a data dir in use: %v; want it to say %q", err, want)
	}
	if strings.Contains(err.Error(), "temporarily unavailable") {
		t.Errorf("open of a data dir in use: %v; want no EAGAIN text", err)
	}
	if _, err := os.Stat(staged); err != nil {
		t.Errorf("the failed open changed the data dir: the running engine's aux file is gone (%v)", err)
	}

	stdin.Close() // the child closes its engine and exits
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v", err)
	}
	e, err = Open(dir)
	if err != nil {
		t.Fatalf("open once the other process closed the dir: %v", err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
}
