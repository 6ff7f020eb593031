// Package localcluster starts and stops local clusters of real `concord
// server` processes on one machine. It is the one place that does so:
// `concord cluster up`, the test harness internal/testcluster, and the
// benchmark drivers bench/seeds and bench/compare all build on it.
//
// It chooses free ports on 127.0.0.1 (FreePort never hands out the same
// port twice in a process), lays out one data dir per node under
// Config.Dir (node1, node2, ...), builds each node's `concord server`
// command line (Args), starts the processes, and stops them by PID: Stop
// (SIGTERM, then SIGKILL after Config.StopTimeout), Kill (SIGKILL), Pause
// and Resume (SIGSTOP, SIGCONT), and Shutdown for all of them. A node's
// output goes to Config.LogDir/nodeN.log, kept across restarts, or to a
// writer of the caller's. With Config.Supervise, a node that exits without
// being asked to is restarted with the same address and data dir.
// WaitReady polls the nodes until every shard has a leader.
//
// Every process is started with Pdeathsig SIGKILL, so that it dies with
// its owner even when the owner is killed; the owner still stops it by
// PID (Shutdown) when it is done with the cluster.
//
// It is not a test harness (no testing.TB: see internal/testcluster), not
// a client (see package client), and it runs only the concord binary it is
// given: other systems (etcd, Redis) keep their own process code and share
// FreePort alone.
//
//	c, err := localcluster.Start(localcluster.Config{Binary: bin, Dir: dir, Nodes: 3, LogDir: dir})
//	if err != nil { ... }
//	defer c.Shutdown(10 * time.Second)
//	if err := c.WaitReady(ctx, time.Minute); err != nil { ... }
//	... use c.Addrs() ...
//	err = c.Kill(0)  // SIGKILL node 0 and wait for it to exit
//	err = c.Start(0) // start it again on the same address and data dir
//
// Nodes are addressed by index, 0-based, in the order of Addrs; their
// directories and log files are numbered from 1 (node1), as `concord
// cluster up` has always laid them out.
package localcluster
