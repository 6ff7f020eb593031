// Package testcluster runs real Concord nodes (bin/concord processes) on
// 127.0.0.1 for end-to-end tests.
//
//	func TestMain(m *testing.M) { testcluster.Main(m) }
//
//	func TestSomething(t *testing.T) {
//		c := testcluster.New(t, testcluster.Options{Nodes: 3})
//		c.WaitReady(t, 30*time.Second)
//		cl := c.Client(t)
//		...
//		c.Kill(0)  // SIGKILL node 0 and wait for it to exit
//		c.Start(0) // restart it with the same address and data dir
//	}
//
// The binary is built once per test binary with `go build -o` into a
// temporary directory (the module root is found by walking up to go.mod), so
// tests never depend on bin/ being fresh; CONCORD_TEST_BIN names a prebuilt
// binary to use instead. Main removes the temporary build directory.
//
// The processes are run by internal/localcluster; this package adds the
// testing.TB side. Each node gets a port from localcluster.FreePort, its
// own data dir under t.TempDir() (node1, node2, ... for indexes 0, 1, ...)
// and a log file beside it (node1.log, ...) that collects its stdout and
// stderr across restarts. Nodes are addressed by index (0-based, the order
// of Endpoints). Every process is killed by PID in t.Cleanup, even
// when the test fails, and started with Pdeathsig SIGKILL so that it dies
// with the test binary. When a test fails, the tail of every node's log is
// printed (CONCORD_TEST_LOG_LINES lines, default 60; 0 prints whole logs),
// and with CONCORD_TEST_KEEP_LOGS=DIR the whole logs are copied under DIR
// (CONCORD_TEST_LOG_LEVEL=debug makes them detailed). A
// node that exits without being asked to (Stop or Kill) fails the test.
//
// Nodes run with the disk space guard off (--reserve-disk-bytes=0) unless
// Options.ReserveDiskBytes asks for a reserve: the server's default, the
// smaller of 1 GiB and 5 % of the filesystem, would fail tests with
// NOSPACE on a host with less free. `concord cluster up` keeps the default.
//
// Start, Stop, Kill, KillAll and Wipe report problems through the test that
// created the cluster, so call them from that test's goroutine.
package testcluster
