package testcluster

import (
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/concord-kv/concord/internal/localcluster"
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
		if build.dir, build.err = os.MkdirTemp("", "concord-testbin-"); build.err == nil {
			build.path, build.err = localcluster.Build(build.dir)
		}
	})
	if build.err != nil {
		t.Fatalf("testcluster: %v", build.err)
	}
	return build.path
}

// ModuleRoot returns the directory of the go.mod above the working directory
// (tests run in their package's directory).
func ModuleRoot() (string, error) { return localcluster.ModuleRoot() }

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
