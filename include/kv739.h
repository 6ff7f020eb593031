/*
 * kv739.h — the CS739 key-value client API, served by Concord.
 *
 * Link with -l739kv (lib/lib739kv.so; lib/libkv739.so is the same library).
 * The library speaks the Redis protocol (RESP) to Concord nodes: every node
 * answers every key, so any server of the list will do. See docs/kv739.md
 * for the semantics, the consistency profiles (KV739_CONSISTENCY) and
 * examples in C and Python.
 *
 * Keys: 1 to 128 printable ASCII bytes (32-126) other than '[' and ']'.
 * Values: 0 to 2,048 such bytes. Callers' value buffers must hold 2,049
 * bytes; the library never writes more than the value and its NUL.
 *
 * Return values: 0 success, 1 "absent" (get: no such key; put: there was
 * no old value), -1 failure or invalid input. A put that returns -1 after
 * valid input may or may not have been applied (the servers could not be
 * reached, or did not answer in time); retrying it is safe. A put the
 * cluster refuses because a server's disk is low on space (the space
 * alarm: -NOSPACE, docs/operations.md "When a disk fills") returns -1 at
 * once, without retrying until the deadline: every server answers the
 * same until space is freed (gets still work). The library exposes no
 * error text; the servers' logs and `concord node list` say which disk.
 *
 * KV739_CONSISTENCY picks a profile at kv739_init: linearizable (the
 * default), stale, or available (puts accepted by a server whose shard has
 * no quorum, reconciled later: opt-in; see docs/kv739.md). Any other value
 * makes kv739_init fail.
 *
 * Every call is safe from many threads at once, and from both sides of a
 * fork(). kv739_init and kv739_shutdown may run while other calls are in
 * flight: those end with their answer or -1 (a put's outcome then unknown).
 */
#ifndef KV739_H
#define KV739_H

#ifdef __cplusplus
extern "C" {
#endif

/* kv739_init connects the library to a cluster: server_names is a list of
 * "host:port" strings ended by NULL or by an empty string. Returns 0, or -1
 * (and changes nothing) if a name is malformed or its host does not
 * resolve. Calling it again re-initialises with the new list. */
int kv739_init(char **server_names);

/* kv739_shutdown frees everything: 0, or -1 if not initialised. */
int kv739_shutdown(void);

/* kv739_get copies key's value, NUL-terminated, into value: 0 if present,
 * 1 if absent, -1 on failure or an invalid key. */
int kv739_get(char *key, char *value);

/* kv739_put stores value under key: 0 and the previous value copied into
 * old_value if there was one, 1 if there was none, -1 on failure or invalid
 * input (an invalid input stores nothing). A put is applied at most once,
 * even when the library retries it after a lost answer. */
int kv739_put(char *key, char *value, char *old_value);

/* kv739_die asks server_name, which must be in the init list, to exit:
 * cleanly (clean != 0) or at once, as after a crash. 0 once asked (also
 * when the server closes the connection as it dies), -1 if the server is
 * not in the list, refused (fault injection disabled), or neither answered
 * nor closed the connection by the call's deadline. */
int kv739_die(char *server_name, int clean);

/* kv739_partition makes server_name (in the init list) talk only to the
 * servers in reachable (NULL- or ""-terminated; empty: isolated). A later
 * call with more servers heals. 0 or -1 as for kv739_die. */
int kv739_partition(char *server_name, char **reachable);

#ifdef __cplusplus
}
#endif

#endif /* KV739_H */
