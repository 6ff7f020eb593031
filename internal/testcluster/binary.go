package testcluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// BinEnv names an environment variable that, when set, is the path of a
// prebuilt concord binary to run instead of building one.
const BinEnv = "CONCORD_TEST_BIN"

var build struct {
	once sync.Once
	dir  string // temporary directory holding the built binary; "" if none
	path string
	err  error
}

// Binary returns the path of the concord binary, building it on first use
// (once per test binary).
func Binary(t testing.TB) string {
	t.Helper()
	build.once.Do(func() {
		if p := os.Getenv(BinEnv); p != "" {
			build.path, build.err = filepath.Abs(p)
			return
		}
		build.path, build.err = buildBinary()
	})
	if build.err != nil {
		t.Fatalf("testcluster: %v", build.err)
	}
	return build.path
}

// buildBinary runs `go build -o TMP/concord ./cmd/concord` in the module root.
func buildBinary() (string, error) {
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "concord-testbin-")
	if err != nil {
		return "", err
	}
	build.dir = dir
	path := filepath.Join(dir, "concord")
	cmd := exec.Command("go", "build", "-o", path, "./cmd/concord")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/concord in %s: %v\n%s", root, err, out)
	}
	return path, nil
}

// ModuleRoot returns the directory of the go.mod above the working directory
// (tests run in their package's directory).
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		} else if !errors.Is(err, os.ErrNotExist) {
			return "", err
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

// Main runs the tests of a package that uses testcluster, then the after
// functions (summaries), and then removes the
// binary it built. Call it from TestMain.
func Main(m *testing.M, after ...func()) {
	code := m.Run()
	for _, f := range after {
		f()
	}
	if build.dir != "" {
		os.RemoveAll(build.dir)
	}
	os.Exit(code)
}
