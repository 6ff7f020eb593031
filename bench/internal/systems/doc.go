// Package systems starts and stops the stores the benchmark drivers
// measure (a Concord cluster, etcd, redis-server) on 127.0.0.1 with their
// data in temp dirs, reads the CPU time their processes use from
// /proc/PID/stat, and parses the peers' own benchmark tools' output. It
// is shared by bench/compare (`make bench-compare`) and bench/redisbench
// (`make bench-redis`) so that both measure the same way.
package systems
