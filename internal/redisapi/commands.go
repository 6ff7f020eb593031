package redisapi

import (
	"sort"
	"strings"

	"github.com/concord-kv/concord/internal/resp"
)

// command is one entry of the command table, which also feeds COMMAND.
type command struct {
	name string // lower case
	// arity as Redis counts it (the name included): n exactly, or at
	// least -n when negative.
	arity int
	flags []string
	// The positions of the first and last key and the step between keys
	// (last -1: to the end), as COMMAND reports them.
	first, last, step int
	group             string // COMMAND DOCS group: string, keyspace, connection, server, transactions
	// plan is set for key commands: see plan. Otherwise run answers.
	plan func(c *conn, args [][]byte) (*plan, error)
	run  func(c *conn, args [][]byte, w *resp.Writer)
	// noAuth: allowed before AUTH. inMulti: runs inside MULTI instead of
	// being queued.
	noAuth, inMulti bool
}

func (cmd *command) arityOK(n int) bool {
	if cmd.arity >= 0 {
		return n == cmd.arity
	}
	return n >= -cmd.arity
}

// commands is the table, by lower-case name; filled by init, since entries
// refer to functions that read it (COMMAND).
var commands map[string]*command

func lookup(name []byte) *command {
	if len(name) > 32 {
		return nil
	}
	var lower [32]byte // on the stack: a lookup per command allocates nothing
	for i, ch := range name {
		if 'A' <= ch && ch <= 'Z' {
			ch += 'a' - 'A'
		}
		lower[i] = ch
	}
	return commands[string(lower[:len(name)])]
}

// sortedCommands returns the table's entries by name.
func sortedCommands() []*command {
	out := make([]*command, 0, len(commands))
	for _, c := range commands {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

func key(name string, arity int, flags string, first, last, step int,
	p func(c *conn, args [][]byte) (*plan, error)) *command {
	return &command{name: name, arity: arity, flags: strings.Fields(flags), first: first, last: last, step: step,
		group: "string", plan: p}
}

func other(name string, arity int, flags, group string, run func(c *conn, args [][]byte, w *resp.Writer)) *command {
	return &command{name: name, arity: arity, flags: strings.Fields(flags), group: group, run: run}
}

func init() {
	list := []*command{
		key("get", 2, "readonly fast", 1, 1, 1, planGet),
		key("set", -3, "write denyoom", 1, 1, 1, planSet),
		key("setnx", 3, "write denyoom fast", 1, 1, 1, planSetNX),
		key("setex", 4, "write denyoom", 1, 1, 1, planSetEX("EX", "setex")),
		key("psetex", 4, "write denyoom", 1, 1, 1, planSetEX("PX", "psetex")),
		key("getset", 3, "write denyoom fast", 1, 1, 1, planGetSet),
		key("getdel", 2, "write fast", 1, 1, 1, planGetDel),
		key("getex", -2, "write fast", 1, 1, 1, planGetEx),
		key("del", -2, "write", 1, -1, 1, planDel),
		key("unlink", -2, "write fast", 1, -1, 1, planDel),
		key("exists", -2, "readonly fast", 1, -1, 1, planExists),
		key("type", 2, "readonly fast", 1, 1, 1, planType),
		key("mget", -2, "readonly fast", 1, -1, 1, planMGet),
		key("mset", -3, "write denyoom", 1, -1, 2, planMSet),
		key("msetnx", -3, "write denyoom", 1, -1, 2, planMSetNX),
		key("incr", 2, "write denyoom fast", 1, 1, 1, planIncr(1, false)),
		key("decr", 2, "write denyoom fast", 1, 1, 1, planIncr(-1, false)),
		key("incrby", 3, "write denyoom fast", 1, 1, 1, planIncr(1, true)),
		key("decrby", 3, "write denyoom fast", 1, 1, 1, planIncr(-1, true)),
		key("incrbyfloat", 3, "write denyoom fast", 1, 1, 1, planIncrFloat),
		key("append", 3, "write denyoom fast", 1, 1, 1, planAppend),
		key("strlen", 2, "readonly fast", 1, 1, 1, planStrlen),
		key("getrange", 4, "readonly", 1, 1, 1, planGetRange),
		key("substr", 4, "readonly", 1, 1, 1, planGetRange),
		key("setrange", 4, "write denyoom", 1, 1, 1, planSetRange),
		key("expire", -3, "write fast", 1, 1, 1, planExpire(1000, false)),
		key("pexpire", -3, "write fast", 1, 1, 1, planExpire(1, false)),
		key("expireat", -3, "write fast", 1, 1, 1, planExpire(1000, true)),
		key("pexpireat", -3, "write fast", 1, 1, 1, planExpire(1, true)),
		key("ttl", 2, "readonly fast", 1, 1, 1, planTTL(ttlSeconds)),
		key("pttl", 2, "readonly fast", 1, 1, 1, planTTL(ttlMillis)),
		key("expiretime", 2, "readonly fast", 1, 1, 1, planTTL(expireSeconds)),
		key("pexpiretime", 2, "readonly fast", 1, 1, 1, planTTL(expireMillis)),
		key("persist", 2, "write fast", 1, 1, 1, planPersist),

		other("scan", -2, "readonly", "keyspace", cmdScan),
		other("keys", 2, "readonly", "keyspace", cmdKeys),
		other("dbsize", 1, "readonly fast", "server", cmdDBSize),
		other("randomkey", 1, "readonly", "keyspace", cmdRandomKey),
		other("flushdb", -1, "write", "server", cmdFlush),
		other("flushall", -1, "write", "server", cmdFlush),

		other("ping", -1, "fast stale", "connection", cmdPing),
		other("echo", 2, "fast stale", "connection", cmdEcho),
		other("hello", -1, "fast stale noauth", "connection", cmdHello),
		other("auth", -2, "fast stale noauth", "connection", cmdAuth),
		other("select", 2, "fast stale", "connection", cmdSelect),
		other("quit", -1, "fast stale noauth", "connection", cmdQuit),
		other("reset", 1, "fast stale noauth", "connection", cmdReset),
		other("client", -2, "stale", "connection", cmdClient),
		other("command", -1, "stale", "server", cmdCommand),
		other("config", -2, "admin stale", "server", cmdConfig),
		other("info", -1, "stale", "server", cmdInfo),
		other("concord.consistency", 2, "fast stale", "connection", cmdConsistency),
		other("concord.session", -4, "write", "concord", cmdSession),
		other("concord.members", 1, "fast stale", "concord", cmdMembers),
		other("concord.fault", -2, "admin", "concord", cmdFault),

		other("multi", 1, "fast", "transactions", cmdMulti),
		other("exec", 1, "", "transactions", cmdExec),
		other("discard", 1, "fast", "transactions", cmdDiscard),
		other("watch", -2, "fast", "transactions", cmdWatch),
		other("unwatch", 1, "fast", "transactions", cmdUnwatch),
	}
	commands = map[string]*command{}
	for _, c := range list {
		commands[c.name] = c
	}
	for _, n := range []string{"hello", "auth", "quit", "reset"} {
		commands[n].noAuth = true
	}
	// These run at once inside MULTI instead of being queued.
	// (UNWATCH is queued, as in Redis: queue.)
	for _, n := range []string{"multi", "exec", "discard", "watch", "quit", "reset"} {
		commands[n].inMulti = true
	}
}
