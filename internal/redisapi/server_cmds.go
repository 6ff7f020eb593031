package redisapi

import (
	"bytes"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/frame"
	"github.com/concord-kv/concord/internal/resp"
)

// RedisVersion is the Redis version the server claims in HELLO and INFO:
// clients use it to pick features (RESP3, command syntax), and Concord's
// commands follow Redis 7's.
const RedisVersion = "7.4.0"

func cmdPing(_ *conn, a [][]byte, w *resp.Writer) {
	switch len(a) {
	case 1:
		w.SimpleString("PONG")
	case 2:
		w.Bulk(a[1])
	default:
		w.Error("ERR wrong number of arguments for 'ping' command")
	}
}

func cmdEcho(_ *conn, a [][]byte, w *resp.Writer) { w.Bulk(a[1]) }

func cmdSelect(_ *conn, a [][]byte, w *resp.Writer) {
	n, err := parseInt(a[1])
	switch {
	case err != nil:
		w.Error(err.Error())
	case n != 0: // Redis's text: Concord has one database, 0
		w.Error("ERR DB index is out of range")
	default:
		w.SimpleString("OK")
	}
}

func cmdQuit(c *conn, _ [][]byte, w *resp.Writer) {
	c.quit = true
	w.SimpleString("OK")
}

// cmdReset returns the connection to its state at connect.
func cmdReset(c *conn, _ [][]byte, w *resp.Writer) {
	c.consistency, c.proto = concordpb.Consistency_LINEARIZABLE, 2
	c.setMulti(nil)
	c.unwatch()
	c.setAuthed(c.s.cfg.AuthToken == "")
	c.setName("")
	*w = *resp.NewWriter(2)
	w.SimpleString("RESET")
}

// cmdConsistency: CONCORD.CONSISTENCY stale|linearizable|available sets
// how this connection's reads are served, and under available how its
// plain SETs and DELs of one key are (plan.avail).
func cmdConsistency(c *conn, a [][]byte, w *resp.Writer) {
	switch strings.ToLower(string(a[1])) {
	case "stale":
		c.consistency = concordpb.Consistency_STALE
	case "linearizable":
		c.consistency = concordpb.Consistency_LINEARIZABLE
	case "available":
		c.consistency = concordpb.Consistency_AVAILABLE
	default:
		w.Error("ERR CONCORD.CONSISTENCY takes stale, linearizable or available")
		return
	}
	w.SimpleString("OK")
}

// checkAuth compares a password with the token in constant time. The user
// name, if given, must be "default" (Concord has no ACL users). Without a
// token the node is a Redis whose default user has no password ("nopass"):
// the old one-argument AUTH is an error, but "default" with any password is
// accepted, since a client configured with a user and password (go-redis
// sends HELLO 3 AUTH default pw) must connect as it does to such a Redis.
func (c *conn) checkAuth(user, pass []byte) error {
	if err := c.verifyAuth(user, pass); err != nil {
		return err
	}
	c.login()
	return nil
}

// verifyAuth is checkAuth without logging in.
func (c *conn) verifyAuth(user, pass []byte) error {
	tok := c.s.cfg.AuthToken
	if tok == "" && user == nil {
		return replyError("ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?")
	}
	if user != nil && string(user) != "default" {
		return errWrongPass
	}
	if tok != "" && !frame.TokenEqual(pass, []byte(tok)) {
		return errWrongPass
	}
	return nil
}

func cmdAuth(c *conn, a [][]byte, w *resp.Writer) {
	var err error
	switch len(a) {
	case 2:
		err = c.checkAuth(nil, a[1])
	case 3:
		err = c.checkAuth(a[1], a[2])
	default:
		err = errSyntax
	}
	if err != nil {
		w.Error(err.Error())
		return
	}
	w.SimpleString("OK")
}

// helloOptions parses HELLO's options in order and answers the first
// error as Redis 7.0 does: a wrong AUTH as it is read, a SETNAME's bad name
// as it is read, an unknown option. It only checks the credentials
// (loggedIn: an AUTH was right); the caller logs in once every option
// parsed, so a refused HELLO changes nothing (Redis 7.0 keeps the login of
// an AUTH before the bad option).
func (c *conn) helloOptions(opts [][]byte) (name []byte, loggedIn bool, err error) {
	for i := 0; i < len(opts); i++ {
		switch opt := strings.ToUpper(string(opts[i])); {
		case opt == "AUTH" && i+2 < len(opts):
			if err := c.verifyAuth(opts[i+1], opts[i+2]); err != nil {
				return nil, false, err
			}
			loggedIn = true
			i += 2
		case opt == "SETNAME" && i+1 < len(opts):
			if err := validName(opts[i+1]); err != nil {
				return nil, false, err
			}
			name = opts[i+1]
			i++
		default:
			return nil, false, replyError("ERR Syntax error in HELLO option '" + cString(opts[i], len(opts[i])) + "'")
		}
	}
	return name, loggedIn, nil
}

// cmdHello: HELLO [protover [AUTH user pass] [SETNAME name]].
func cmdHello(c *conn, a [][]byte, w *resp.Writer) {
	proto := c.proto
	if len(a) > 1 {
		v, err := parseInt(a[1])
		switch {
		case err != nil:
			w.Error("ERR Protocol version is not an integer or out of range")
			return
		case v < 2 || v > 3:
			w.Error("NOPROTO unsupported protocol version")
			return
		}
		proto = int(v)
	}
	name, loggedIn, err := c.helloOptions(a[min(2, len(a)):])
	if err != nil {
		w.Error(err.Error())
		return
	}
	if loggedIn {
		c.login()
	}
	if !c.authed {
		w.Error("NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time")
		return
	}
	if name != nil {
		c.setName(string(name))
	}
	c.proto = proto
	*w = *resp.NewWriter(proto)
	w.Map(7)
	w.BulkString("server")
	w.BulkString("redis")
	w.BulkString("version")
	w.BulkString(RedisVersion)
	w.BulkString("proto")
	w.Int(int64(proto))
	w.BulkString("id")
	w.Int(c.id)
	w.BulkString("mode")
	w.BulkString("standalone")
	w.BulkString("role")
	w.BulkString("master")
	w.BulkString("modules")
	w.Array(0)
}

func validName(name []byte) error {
	if len(name) > maxClientName {
		return errNameTooLong
	}
	for _, ch := range name {
		if ch <= ' ' || ch > '~' {
			return replyError("ERR Client names cannot contain spaces, newlines or special characters.")
		}
	}
	return nil
}

// maxClientName bounds a connection's name (CLIENT SETNAME, HELLO
// SETNAME): every CLIENT LIST prints every name, so at MaxClients
// connections (10,000) of the longest names the list stays under ~7 MiB,
// where names as long as a bulk string (a value: up to 8 MiB) made it
// gigabytes, built again for every CLIENT LIST.
const maxClientName = 256

const errNameTooLong = replyError("ERR Client names cannot be longer than 256 bytes")

func (c *conn) setName(name string) {
	c.mu.Lock()
	c.name = name
	c.mu.Unlock()
}

func (c *conn) getName() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.name
}

// subcommandOK answers Redis's error for a subcommand of container (CLIENT,
// CONFIG, COMMAND) that arities (by lower-case name, counted as Redis
// counts them: the command and subcommand included) does not have, or
// that has the wrong number of arguments, and reports whether neither.
func subcommandOK(container string, arities map[string]int, a [][]byte, w *resp.Writer) bool {
	sub := strings.ToLower(string(a[1]))
	arity, ok := arities[sub]
	switch {
	case !ok:
		w.Error("ERR unknown subcommand '" + cString(a[1], 128) + "'. Try " + strings.ToUpper(container) + " HELP.")
	case (arity >= 0 && len(a) != arity) || len(a) < -arity:
		w.Error("ERR wrong number of arguments for '" + container + "|" + sub + "' command")
	default:
		return true
	}
	return false
}

// The subcommands of CLIENT, CONFIG and COMMAND that Concord knows, with
// Redis's arities.
var (
	clientArities  = map[string]int{"id": 2, "setname": 3, "getname": 2, "info": 2, "list": -2, "setinfo": 4, "help": 2}
	configArities  = map[string]int{"get": -3, "set": -4, "rewrite": 2, "resetstat": 2, "help": 2}
	commandArities = map[string]int{"count": 2, "list": -2, "info": -2, "docs": -2, "help": 2}
)

// cmdClient: CLIENT ID | SETNAME | GETNAME | INFO | LIST | SETINFO.
func cmdClient(c *conn, a [][]byte, w *resp.Writer) {
	if !subcommandOK("client", clientArities, a, w) {
		return
	}
	sub := strings.ToUpper(string(a[1]))
	switch {
	case sub == "ID":
		w.Int(c.id)
	case sub == "SETNAME":
		if err := validName(a[2]); err != nil {
			w.Error(err.Error())
			return
		}
		c.setName(string(a[2]))
		w.SimpleString("OK")
	case sub == "GETNAME":
		if n := c.getName(); n != "" {
			w.BulkString(n)
		} else {
			w.Null()
		}
	case sub == "INFO":
		w.Verbatim("txt", []byte(c.describe()+"\n"))
	case sub == "LIST":
		list, err := c.s.clientListFiltered(a[2:])
		if err != nil {
			w.Error(err.Error())
			return
		}
		w.Verbatim("txt", []byte(list))
	case sub == "SETINFO":
		if err := c.setInfo(a[2], a[3]); err != nil {
			w.Error(err.Error())
			return
		}
		w.SimpleString("OK")
	case sub == "HELP":
		w.Array(1)
		w.SimpleString("CLIENT ID | SETNAME name | GETNAME | INFO | LIST | SETINFO attr value")
	}
}

// setInfo is CLIENT SETINFO lib-name|lib-ver value, checked as Redis 7.2
// checks it (an unknown attribute, or a value with bytes outside '!'..'~',
// which would break CLIENT LIST's fields, is refused) and bounded as a
// connection's name is, since every CLIENT LIST prints both.
func (c *conn) setInfo(attr, val []byte) error {
	name := cString(attr, len(attr))
	var dst *string
	switch strings.ToLower(string(attr)) {
	case "lib-name":
		dst = &c.libName
	case "lib-ver":
		dst = &c.libVer
	default:
		return replyError("ERR Unrecognized option '" + name + "'")
	}
	if len(val) > maxClientName {
		return replyError(fmt.Sprintf("ERR %s cannot be longer than %d bytes", name, maxClientName))
	}
	for _, ch := range val {
		if ch < '!' || ch > '~' {
			return replyError("ERR " + name + " cannot contain spaces, newlines or special characters.")
		}
	}
	c.mu.Lock()
	*dst = string(val)
	c.mu.Unlock()
	return nil
}

// describe is the connection's line in CLIENT LIST.
func (c *conn) describe() string {
	c.mu.Lock()
	name, last, watched, queued, libName, libVer := c.name, c.lastCmd, c.nWatched, c.nQueued, c.libName, c.libVer
	c.mu.Unlock()
	flags := "N"
	if queued >= 0 {
		flags = "x" // inside MULTI, as Redis flags it
	}
	return fmt.Sprintf("id=%d addr=%s laddr=%s fd=0 name=%s age=%d idle=0 flags=%s db=0 sub=0 psub=0 ssub=0 multi=%d watch=%d qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 omem=0 tot-mem=0 events=r cmd=%s user=default redir=-1 resp=%d lib-name=%s lib-ver=%s tentative=%d",
		c.id, c.nc.RemoteAddr(), c.nc.LocalAddr(), name, int(time.Since(c.created).Seconds()), flags, queued, watched, cmdOrNull(last), c.proto, libName, libVer, c.tentative.Load())
}

func cmdOrNull(s string) string {
	if s == "" {
		return "NULL"
	}
	return s
}

func (s *Server) clientList() string {
	s.mu.Lock()
	conns := make([]*conn, 0, len(s.clients))
	for _, c := range s.clients {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	slices.SortFunc(conns, func(a, b *conn) int { return int(a.id - b.id) })
	return describeAll(conns)
}

// describeAll is CLIENT LIST's text: a line per connection.
func describeAll(conns []*conn) string {
	var b strings.Builder
	for _, c := range conns {
		b.WriteString(c.describe())
		b.WriteByte('\n')
	}
	return b.String()
}

// clientListFiltered answers CLIENT LIST's options as Redis 7.0 parses
// them: TYPE t (every Concord connection is a normal client; there are no
// replicas or subscribers) or ID id..., in the order given, an unknown id
// skipped; anything else is a syntax error.
func (s *Server) clientListFiltered(opts [][]byte) (string, error) {
	switch {
	case len(opts) == 0:
		return s.clientList(), nil
	case len(opts) == 2 && strings.EqualFold(string(opts[0]), "type"):
		switch strings.ToLower(string(opts[1])) {
		case "normal":
			return s.clientList(), nil
		case "master", "replica", "slave", "pubsub":
			return "", nil
		}
		return "", replyError("ERR Unknown client type '" + cString(opts[1], len(opts[1])) + "'")
	case len(opts) > 1 && strings.EqualFold(string(opts[0]), "id"):
		return s.clientsByID(opts[1:])
	}
	return "", errSyntax
}

// clientsByID describes the connections named by ids, in their order.
func (s *Server) clientsByID(ids [][]byte) (string, error) {
	want := make([]int64, len(ids))
	for i, id := range ids {
		n, err := parseInt(id)
		if err != nil {
			return "", replyError("ERR Invalid client ID")
		}
		want[i] = n
	}
	s.mu.Lock()
	var conns []*conn
	for _, id := range want {
		if c, ok := s.clients[id]; ok {
			conns = append(conns, c)
		}
	}
	s.mu.Unlock()
	return describeAll(conns), nil
}

// cmdCommand: COMMAND, COMMAND COUNT | INFO [names] | DOCS [names] | LIST.
func cmdCommand(c *conn, a [][]byte, w *resp.Writer) {
	sub := ""
	if len(a) > 1 {
		if !subcommandOK("command", commandArities, a, w) {
			return
		}
		sub = strings.ToUpper(string(a[1]))
	}
	switch {
	case len(a) == 1:
		all := sortedCommands()
		w.Array(len(all))
		for _, cmd := range all {
			writeCommandInfo(w, cmd)
		}
	case sub == "COUNT" && len(a) == 2:
		w.Int(int64(len(commands)))
	case sub == "LIST":
		names, err := listCommands(a[2:])
		if err != nil {
			w.Error(err.Error())
			return
		}
		w.Array(len(names))
		for _, n := range names {
			w.BulkString(n)
		}
	case sub == "INFO":
		cmds := requested(a[2:])
		w.Array(len(cmds))
		for _, cmd := range cmds {
			if cmd == nil {
				w.Null() // Redis's null bulk string in RESP2
			} else {
				writeCommandInfo(w, cmd)
			}
		}
	case sub == "HELP":
		w.Array(1)
		w.SimpleString("COMMAND | COMMAND COUNT | LIST [FILTERBY PATTERN pattern] | INFO [name ...] | DOCS [name ...]")
	case sub == "DOCS":
		var cmds []*command
		for _, cmd := range requested(a[2:]) {
			if cmd != nil {
				cmds = append(cmds, cmd)
			}
		}
		w.Map(len(cmds))
		for _, cmd := range cmds {
			w.BulkString(cmd.name)
			w.Map(3)
			w.BulkString("summary")
			w.BulkString("see docs/redis.md")
			w.BulkString("since")
			w.BulkString("1.0.0")
			w.BulkString("group")
			w.BulkString(cmd.group)
		}
	}
}

// listCommands answers COMMAND LIST [FILTERBY MODULE m | ACLCAT c |
// PATTERN p], parsed as Redis 7.0 parses it: one FILTERBY, last, or a
// syntax error. PATTERN matches case-insensitively, as Redis's does.
// Concord has no modules and gives its commands no ACL categories
// (COMMAND INFO), so those two filters match nothing.
func listCommands(opts [][]byte) ([]string, error) {
	if len(opts) != 0 && (len(opts) != 3 || !strings.EqualFold(string(opts[0]), "filterby")) {
		return nil, errSyntax
	}
	filter, pattern := "", []byte(nil)
	if len(opts) == 3 {
		filter, pattern = strings.ToLower(string(opts[1])), bytes.ToLower(opts[2])
		if filter != "module" && filter != "aclcat" && filter != "pattern" {
			return nil, errSyntax
		}
		if len(pattern) > maxPatternBytes {
			return nil, errPatternTooLong
		}
	}
	var names []string
	for _, cmd := range sortedCommands() {
		if filter == "" || (filter == "pattern" && globMatch(pattern, []byte(cmd.name))) {
			names = append(names, cmd.name)
		}
	}
	return names, nil
}

// requested returns the commands named (nil for unknown names), or every
// command when no name is given.
func requested(names [][]byte) []*command {
	if len(names) == 0 {
		return sortedCommands()
	}
	out := make([]*command, len(names))
	for i, n := range names {
		out[i] = lookup(n)
	}
	return out
}

// writeCommandInfo writes Redis 7's ten-element command description.
func writeCommandInfo(w *resp.Writer, cmd *command) {
	w.Array(10)
	w.BulkString(cmd.name)
	w.Int(int64(cmd.arity))
	w.Set(len(cmd.flags))
	for _, f := range cmd.flags {
		w.SimpleString(f)
	}
	w.Int(int64(cmd.first))
	w.Int(int64(cmd.last))
	w.Int(int64(cmd.step))
	w.Set(0) // ACL categories
	w.Set(0) // tips
	w.Set(0) // key specifications (Redis 7.0 answers a set)
	w.Set(0) // subcommands (a set too)
}

// cmdConfig: CONFIG GET pattern...: the few settings clients and
// redis-benchmark ask for at connect. CONFIG SET is refused.
func cmdConfig(c *conn, a [][]byte, w *resp.Writer) {
	if !subcommandOK("config", configArities, a, w) {
		return
	}
	if !strings.EqualFold(string(a[1]), "get") {
		w.Error("ERR CONFIG " + strings.ToUpper(string(a[1])) + " is not supported by Concord (its settings are the node's flags)")
		return
	}
	settings := [][2]string{
		{"appendfsync", "always"}, {"appendonly", "yes"}, {"databases", "1"}, {"maxclients", strconv.Itoa(c.s.cfg.MaxClients)},
		{"maxmemory", "0"}, {"maxmemory-policy", "noeviction"}, {"proto-max-bulk-len", strconv.Itoa(c.s.limits.MaxBulkBytes)},
		{"save", ""}, {"timeout", "0"},
	}
	for _, p := range a[2:] {
		if len(p) > maxPatternBytes {
			w.Error(string(errPatternTooLong))
			return
		}
	}
	out := configMatches(settings, a[2:])
	w.Map(len(out))
	for _, kv := range out {
		w.BulkString(kv[0])
		w.BulkString(kv[1])
	}
}

// configMatches picks the settings CONFIG GET's arguments name, as Redis
// 7.0 does: an argument without glob characters names one setting, any
// case, and is answered under the name as given (CONFIG GET MAXMEMORY
// answers MAXMEMORY); a pattern matches without regard to case and answers
// the settings' own names. A setting is answered once, under the first
// argument that named it.
func configMatches(settings [][2]string, args [][]byte) [][2]string {
	var out [][2]string
	seen := make(map[string]bool)
	add := func(name string, kv [2]string) {
		if !seen[kv[0]] {
			seen[kv[0]] = true
			out = append(out, [2]string{name, kv[1]})
		}
	}
	for _, arg := range args {
		exact := !bytes.ContainsAny(arg, "[*?")
		pattern := bytes.ToLower(arg)
		for _, kv := range settings {
			switch {
			case exact && strings.EqualFold(string(arg), kv[0]):
				add(string(arg), kv)
			case !exact && globMatch(pattern, []byte(kv[0])):
				add(kv[0], kv)
			}
		}
	}
	return out
}

// cmdInfo: INFO [section...]: server, clients, keyspace, replication,
// persistence; "all", "everything" and "default" give all five.
func cmdInfo(c *conn, a [][]byte, w *resp.Writer) {
	want := map[string]bool{}
	for _, s := range a[1:] {
		want[strings.ToLower(string(s))] = true
	}
	all := len(want) == 0 || want["all"] || want["everything"] || want["default"]
	var b strings.Builder
	info := c.s.b.Info()
	for _, sec := range []struct {
		name string
		f    func(*strings.Builder, NodeInfo)
	}{
		{"server", c.s.infoServer}, {"clients", c.s.infoClients}, {"persistence", c.s.infoPersistence},
		{"replication", c.s.infoReplication}, {"keyspace", c.infoKeyspace},
	} {
		if all || want[sec.name] {
			if b.Len() > 0 {
				b.WriteString("\r\n")
			}
			b.WriteString("# " + strings.ToUpper(sec.name[:1]) + sec.name[1:] + "\r\n")
			sec.f(&b, info)
		}
	}
	w.Verbatim("txt", []byte(b.String()))
}

func field(b *strings.Builder, k string, v any) { fmt.Fprintf(b, "%s:%v\r\n", k, v) }

func (s *Server) infoServer(b *strings.Builder, n NodeInfo) {
	up := time.Since(s.started)
	field(b, "redis_version", RedisVersion)
	field(b, "redis_mode", "standalone")
	field(b, "server_name", "concord")
	field(b, "concord_node_id", n.NodeID)
	field(b, "concord_cluster_id", fmt.Sprintf("%x", n.ClusterID))
	field(b, "concord_grpc_addr", n.Addr)
	field(b, "os", runtime.GOOS+" "+runtime.GOARCH)
	field(b, "go_version", runtime.Version())
	field(b, "tcp_port", portOf(s.Addr()))
	field(b, "uptime_in_seconds", int64(up.Seconds()))
	field(b, "uptime_in_days", int64(up.Hours()/24))
}

func portOf(a fmt.Stringer) string {
	if a == nil {
		return ""
	}
	str := a.String()
	return str[strings.LastIndexByte(str, ':')+1:]
}

func (s *Server) infoClients(b *strings.Builder, _ NodeInfo) {
	field(b, "connected_clients", s.Clients())
	field(b, "maxclients", s.cfg.MaxClients)
}

func (s *Server) infoPersistence(b *strings.Builder, n NodeInfo) {
	field(b, "loading", 0)
	field(b, "storage_engine", "pebble")
	field(b, "fsync", "always (every write is fsynced on a majority of its shard's replicas before the reply)")
	field(b, "aof_enabled", 1)
	field(b, "rdb_bgsave_in_progress", 0)
	field(b, "data_dir", n.DataDir)
}

func (s *Server) infoReplication(b *strings.Builder, n NodeInfo) {
	field(b, "role", "master")
	field(b, "connected_slaves", 0)
	field(b, "concord_shards", n.Shards)
	field(b, "concord_shards_hosted", len(n.Hosted))
	field(b, "concord_shards_led", len(n.Led))
	field(b, "concord_led_shard_ids", joinIDs(n.Led))
	field(b, "concord_hosted_shard_ids", joinIDs(n.Hosted))
	field(b, "concord_tentative_writes_held", n.TentativeHeld)
}

func joinIDs(ids []uint64) string {
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = strconv.FormatUint(id, 10)
	}
	return strings.Join(parts, ",")
}

// infoKeyspaceCap bounds the keys INFO counts; past it the count reads as
// a lower bound (keys_exact=0).
const infoKeyspaceCap = 100_000

func (c *conn) infoKeyspace(b *strings.Builder, _ NodeInfo) {
	n := 0
	err := c.walk(infoKeyspaceCap, func(*concordpb.KeyValue) error { n++; return nil })
	exact := 1
	if err != nil {
		exact = 0
	}
	if n > 0 {
		fmt.Fprintf(b, "db0:keys=%d,expires=0,avg_ttl=0,keys_exact=%d\r\n", n, exact)
	}
}
