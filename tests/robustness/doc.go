// Package robustness runs a real 3-node Concord cluster under injected faults
// while several clients issue Get, Put, Delete, CompareAndSwap and expiry
// commands (some puts with a TTL; ttl.go, expire.go) on a small key set,
// and atomic multi-key operations over groups of keys that share a
// hash tag (groups.go, multi.go; Redis commands too, respclient.go),
// records every operation with its invocation and return times, and
// checks the history for linearizability with porcupine. It also writes
// unique keys throughout and checks, after healing, that every acknowledged
// one is present. TestAvailableNoLostWrites (available.go) does the same for
// available-mode puts, tentative ones included, outside any history: available
// mode is not linearizable.
//
// A fault schedule comes from a seed, printed by every run. The same seed
// starts the same schedule, but does not replay it whole: the nemesis's
// generator also picks the node each health poll asks (waitHealthy, and
// the membership waits), and how many polls a heal takes depends on
// timing, as does which node leads (a fault aimed at a leader); so runs of
// one seed diverge after the first heal that took a different number of
// polls (stop 39 saw seed 181255405 give two different fault lists). A failing history is kept, with
// porcupine's HTML visualisation, under $CONCORD_ROBUSTNESS_OUT (default:
// robustness-out/ in the repository root).
//
// Operations whose outcome the client cannot know (client.ErrAmbiguous) are
// recorded as such: they may take effect at any point after their
// invocation, or never. Operations that certainly did not take effect are
// left out of the history: among them the writes the space alarm refused
// (the space fault, Admin.DiskLow), which must then never show.
package robustness
