package resp

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/concord-kv/concord/internal/testcluster"
)

// TestRedisServerDifferential sends the same commands, as raw RESP, to a
// real redis-server and to a Concord cluster, over RESP2 and RESP3, and
// fails on any reply that differs in type or content, printing the
// command and both replies. The scripts (diffScripts) cover the commands
// docs/redis.md lists as supported, mostly at their edges: arity, bad
// numbers, option conflicts, missing keys, empty and binary values,
// transactions. Differences that docs/redis.md states on purpose are in
// knownDifferences, each with its reason; such a step that stops
// differing fails too, so the list stays true. Skipped when no
// redis-server binary is found (PATH, then .cache/peers/bin under the
// module root).
func TestRedisServerDifferential(t *testing.T) {
	t.Parallel()
	bin := redisServerBinary(t)
	redisAddr := startRedisServer(t, bin)
	c := startCluster(t, testcluster.Options{})
	awaitIncrFloatText(t, c)

	for _, proto := range []int{2, 3} {
		t.Run(fmt.Sprintf("RESP%d", proto), func(t *testing.T) {
			for i, s := range diffScripts {
				// A tag of its own per script and protocol: each script
				// starts from absent keys, and its keys share a shard.
				tag := fmt.Sprintf("{t%d.%d}", proto, i)
				node := i % c.N() // spread over the nodes: forwarded and local
				runDiffScript(t, s, proto, tag, redisAddr, c.RedisAddr(node), c.RedisAddr((node+1)%c.N()))
			}
		})
	}
}

// knownDifferences are the steps whose replies differ from Redis 7.0's on
// purpose, by script name and step as written in diffScripts, with the
// reason.
var knownDifferences = map[string]string{
	`connection: SELECT 1`:                                      "one database (docs/redis.md, Refused: SELECT n, n != 0)",
	`GET SET: SET "" v`:                                         "an empty key is bad input (docs/redis.md, Errors)",
	`GET SET: GET ""`:                                           "an empty key is bad input (docs/redis.md, Errors)",
	`server: CONFIG GET appendonly`:                             "Concord reports its real persistence, appendonly yes (docs/redis.md, CONFIG GET)",
	`server: CONFIG GET databases`:                              "one database (docs/redis.md, CONFIG GET)",
	`server: CONFIG SET timeout 0`:                              "settings are the node's flags (docs/redis.md, Refused: CONFIG SET)",
	`keyspace: FLUSHDB`:                                         "refused without --redis-enable-flush (docs/redis.md, Refused: FLUSHDB)",
	`keyspace: FLUSHALL`:                                        "refused without --redis-enable-flush (docs/redis.md, Refused: FLUSHALL)",
	`MULTI with PING: PING`:                                     "MULTI queues key commands only (docs/redis.md, MULTI/EXEC)",
	`MULTI with PING: EXEC`:                                     "MULTI queues key commands only (docs/redis.md, MULTI/EXEC)",
	`EXPIRE: EXPIRE {t}k 100 XX LT`:                             "no op condition for XX with LT; refused (docs/redis.md, Refused)",
	`SETRANGE: SETRANGE {t}k 9223372036854775807 x`:             "the limit is --max-value-bytes, not 512 MiB (docs/redis.md, Errors: op failures)",
	`keyspace: SCAN -1`:                                         "a cursor is an id in the node's table; an unknown one is an error (docs/redis.md, Partial: SCAN)",
	`unknown commands: LPUSH {t}l x`:                            "values are strings only; lists are an unknown command (docs/redis.md, Refused)",
	`SETRANGE: SETRANGE {t}k 600000000 x`:                       "the limit is --max-value-bytes, not 512 MiB (docs/redis.md, Errors: op failures)",
	`APPEND GETRANGE SETRANGE edges: SETRANGE {t}k 536870912 x`: "the limit is --max-value-bytes, not 512 MiB (docs/redis.md, Errors: op failures)",
	`server and connection edges: COMMAND DOCS get`:             "COMMAND DOCS gives a group, not a summary (docs/redis.md, commands: server)",
	`server and connection edges: CLIENT SETINFO lib-name x`:    "Concord answers as Redis 7.2, which has CLIENT SETINFO; 7.0 has not (docs/redis.md, commands: connection)",
	`INFO shapes, RESET, QUIT in MULTI: ECHO x`:                 "MULTI queues key commands only (docs/redis.md, MULTI/EXEC)",
	`HELLO option order: CLIENT GETNAME`:                        "a refused HELLO changes nothing; Redis 7.0 keeps the SETNAME before the bad option (docs/redis.md, commands: connection)",
	`handshake: COMMAND INFO get`:                               "no ACL categories nor key specifications (docs/redis.md, Partial: COMMAND)",
	`WATCH a write of the same value: EXEC`:                     "WATCH compares values: a write of the value WATCH read does not abort (docs/redis.md, Partial: WATCH)",
	`WATCH a new expiry: EXEC`:                                  "WATCH compares values: a new expiry alone does not abort (docs/redis.md, Partial: WATCH)",
	`WATCH a change and a change back: EXEC`:                    "WATCH compares values: a change and a change back does not abort (docs/redis.md, Partial: WATCH)",
	`handshake: CONFIG GET maxmemor*`:                           "CONFIG GET knows a few settings only (docs/redis.md, Partial: CONFIG GET)",
}

// diffScript is a named list of steps run on one connection to each
// server. A step is a command line: words split at spaces, a word in
// double quotes is a Go string literal ("" is empty, "\x00" a zero byte).
// "{t}" in a word becomes the script's hash tag. A prefix changes how the
// replies are compared (stepMode): "~N " integers within N of each other,
// "@ " in any order, "^ " by shape only. "> " sends the rest of the line
// as it is, an inline command (as telnet sends). "! " before the others
// marks the script's last step, after which the servers close the
// connection (a protocol error). "& " first runs the step on the script's
// second connection (runDiffScript).
type diffScript struct {
	name  string
	steps []string
}

var diffScripts = []diffScript{
	incrByFloatBroad,
	{"connection", []string{
		`PING`, `PING hello`, `PING a b`, `ECHO "a\r\nb\x00"`, `ECHO`, `ECHO a b`,
		`SELECT 0`, `SELECT 1`, `SELECT 0`, `SELECT x`, `SELECT -1`, `SELECT`,
		`AUTH x`, `AUTH`, `HELLO 4`, `HELLO x`, `HELLO 3 FOO`,
		`CLIENT GETNAME`, `CLIENT SETNAME "a b"`, `CLIENT SETNAME me`, `CLIENT GETNAME`, `CLIENT SETNAME`,
		`CLIENT FOO`, `CLIENT`, `client foo bar`, `CLIENT ID x`, `CLIENT GETNAME x`, `CLIENT SETNAME a b`, `CLIENT INFO x`,
	}},
	{"unknown commands", []string{
		`NOSUCH`, `NOSUCH a b`, `LPUSH {t}l x`, `nosuch 1 2 3 4 5 6 7 8 9 10 11`, `NOSUCH "\x00\xff"`, `NOSUCH "a\r\nb" "\xffc"`,
		`NOSUCH 0123456789012345678901234567890123456789 0123456789012345678901234567890123456789 0123456789012345678901234567890123456789 tail`,
	}},
	{"mixed case", []string{
		`sEt {t}k v`, `GeT {t}k`, `get {t}k`, `Set {t}k v nX`, `set {t}k v Xx Get`, `exPIRE {t}k 100 gt`,
		`~1 tTl {t}k`, `PiNg`,
	}},
	{"arity", arityChecks()},

	{"GET SET", []string{
		`GET {t}k`, `SET {t}k v`, `GET {t}k`, `SET {t}k ""`, `GET {t}k`, `STRLEN {t}k`,
		`SET {t}b "\x00\xff\r\n$-1\r\n"`, `GET {t}b`, `STRLEN {t}b`, `SET "" v`, `GET ""`,
	}},
	{"SET options", []string{
		`SET {t}k v NX`, `SET {t}k w NX`, `GET {t}k`, `SET {t}k w XX`, `SET {t}n w XX`, `GET {t}n`,
		`SET {t}k v NX XX`, `SET {t}k v XX NX`, `SET {t}k v NX NX`, `SET {t}k v EX 10 PX 100`,
		`SET {t}k v EX 10 EX 10`, `SET {t}k v KEEPTTL EX 10`, `SET {t}k v EX 10 KEEPTTL`,
		`SET {t}k v EX`, `SET {t}k v PX`, `SET {t}k v FOO`, `SET {t}k v GET GET`,
		`SET {t}k v EX 0`, `SET {t}k v EX -1`, `SET {t}k v PX 0`, `SET {t}k v EX 1.5`, `SET {t}k v EX x`,
		`SET {t}k v EX 9223372036854775807`, `SET {t}k v EX 9223372036854775`, `SET {t}k v PX 9223372036854775807`,
		`SET {t}k v EX 99999999999999999999`, `SET {t}k v EX x EX 10`, `SET {t}k v EX x FOO`, `SET {t}k v PX 10 EX x`,
		`SET {t}k v EXAT 9223372036854775`, `SET {t}k v EX 10 NX GET KEEPTTL`, `SET {t}k v GET NX XX`, `SET {t}k v EXAT 0`, `SET {t}k v PXAT -5`,
		`GET {t}k`, `TTL {t}k`,
	}},
	{"SET GET", []string{
		`SET {t}k v GET`, `SET {t}k w GET`, `SET {t}k x NX GET`, `GET {t}k`, `SET {t}n x NX GET`, `GET {t}n`,
		`SET {t}m x XX GET`, `GET {t}m`, `SET {t}k y XX GET`, `SET {t}k z GET EX 100`, `~1 TTL {t}k`,
		`SET {t}k z2 KEEPTTL GET`, `~1 TTL {t}k`, `SET {t}k z3`, `TTL {t}k`,
	}},
	{"SET expiry", []string{
		`SET {t}k v EX 100`, `~1 TTL {t}k`, `~2000 PTTL {t}k`, `SET {t}k v PX 100000`, `~1 TTL {t}k`,
		`SET {t}k v EXAT 4102444800`, `TTL {t}a`, `EXPIRETIME {t}k`, `PEXPIRETIME {t}k`,
		`SET {t}k v PXAT 4102444800123`, `PEXPIRETIME {t}k`, `EXPIRETIME {t}k`,
		`SET {t}k w KEEPTTL`, `PEXPIRETIME {t}k`, `SET {t}k w`, `TTL {t}k`, `PEXPIRETIME {t}k`,
		`SET {t}old v EXAT 1`, `GET {t}old`, `EXISTS {t}old`,
	}},
	{"SETNX SETEX PSETEX GETSET", []string{
		`SETNX {t}k v`, `SETNX {t}k w`, `GET {t}k`,
		`SETEX {t}e 100 v`, `~1 TTL {t}e`, `SETEX {t}e 0 v`, `SETEX {t}e -1 v`, `SETEX {t}e x v`,
		`SETEX {t}e 9223372036854775807 v`, `SETEX {t}e 9223372036854775 v`,
		`PSETEX {t}p 100000 v`, `~2000 PTTL {t}p`, `PSETEX {t}p 0 v`, `PSETEX {t}p 1.5 v`,
		`GETSET {t}g a`, `GETSET {t}g b`, `GET {t}g`, `SETEX {t}g 100 c`, `GETSET {t}g d`, `TTL {t}g`,
	}},
	{"GETDEL GETEX", []string{
		`GETDEL {t}k`, `SET {t}k v`, `GETDEL {t}k`, `EXISTS {t}k`,
		`GETEX {t}k`, `GETEX {t}k EX 100`, `GETEX {t}k EX 0`, `GETEX {t}k PX 9223372036854775807`, `GETEX {t}k EX x`, `SET {t}k v`, `GETEX {t}k`, `TTL {t}k`,
		`GETEX {t}k EX 100`, `~1 TTL {t}k`, `GETEX {t}k PERSIST`, `TTL {t}k`,
		`GETEX {t}k PX 100000`, `~2000 PTTL {t}k`, `GETEX {t}k EXAT 4102444800`, `EXPIRETIME {t}k`,
		`GETEX {t}k PXAT 4102444800123`, `PEXPIRETIME {t}k`,
		`GETEX {t}k EX 0`, `GETEX {t}k EX -1`, `GETEX {t}k EX x`, `GETEX {t}k EX`, `GETEX {t}k FOO`,
		`GETEX {t}k EX 10 PX 100`, `GETEX {t}k PERSIST EX 10`, `GETEX {t}k EX 10 PERSIST`, `GETEX {t}k PERSIST PERSIST`,
		`GETEX {t}k EX 9223372036854775807`, `GETEX {t}k PX 9223372036854775807`, `GETEX {t}k NX`, `GETEX {t}k KEEPTTL`,
		`GETEX {t}k EX 10 EX 20`, `~1 TTL {t}k`, `GETEX {t}k EX x EX 30`, `~1 TTL {t}k`, `GETEX {t}k EXAT 1`, `GET {t}k`,
	}},
	{"MGET MSET MSETNX", []string{
		`MSET {t}a 1 {t}b 2`, `MGET {t}a {t}b {t}c`, `MSET {t}a`, `MSET {t}a 1 {t}b`, `MSET {t}a 1 {t}a 2`, `GET {t}a`,
		`MSETNX {t}a 1 {t}c 3`, `GET {t}c`, `MSETNX {t}c 3 {t}d 4`, `MGET {t}c {t}d`, `MSETNX {t}e 1 {t}e 2`, `GET {t}e`,
		`MSETNX {t}a`, `MSETNX {t}a 1 {t}b`, `MGET {t}a {t}a`,
	}},
	{"DEL EXISTS TYPE", []string{
		`SET {t}a 1`, `SET {t}b 2`, `EXISTS {t}a {t}a {t}b {t}c`, `TYPE {t}a`, `TYPE {t}c`,
		`DEL {t}a {t}a {t}c`, `EXISTS {t}a`, `UNLINK {t}b {t}b`, `DEL {t}z`, `EXISTS {t}z {t}z`,
	}},
	{"INCR family", []string{
		`INCR {t}n`, `INCR {t}n`, `DECR {t}n`, `INCRBY {t}n 10`, `DECRBY {t}n 3`, `INCRBY {t}n -20`,
		`INCRBY {t}n x`, `INCRBY {t}n 1.5`, `INCRBY {t}n ""`, `INCRBY {t}n " 1"`, `INCRBY {t}n +1`, `INCRBY {t}n 01`,
		`INCRBY {t}n 99999999999999999999`, `DECRBY {t}n -9223372036854775808`, `DECRBY {t}n 9223372036854775807`,
		`SET {t}n 9223372036854775807`, `INCR {t}n`, `GET {t}n`, `SET {t}n -9223372036854775808`, `DECR {t}n`,
		`SET {t}s abc`, `INCR {t}s`, `DECR {t}s`, `INCRBY {t}s 1`, `SET {t}s " 1"`, `INCR {t}s`, `SET {t}s 1.0`, `INCR {t}s`,
		`SET {t}s 007`, `INCR {t}s`, `SET {t}s -0`, `INCR {t}s`, `SET {t}s ""`, `INCR {t}s`,
		`SET {t}s 99999999999999999999`, `INCR {t}s`, `SET {t}s 1`, `APPEND {t}s 0`, `INCR {t}s`,
	}},
	{"INCRBYFLOAT", []string{
		`INCRBYFLOAT {t}f 1.5`, `INCRBYFLOAT {t}f 0.1`, `INCRBYFLOAT {t}f -1.6`, `INCRBYFLOAT {t}f 2`,
		`INCRBYFLOAT {t}f 1e3`, `INCRBYFLOAT {t}f 5.0e-1`, `GET {t}f`,
		`INCRBYFLOAT {t}f nan`, `INCRBYFLOAT {t}f inf`, `INCRBYFLOAT {t}f -inf`, `INCRBYFLOAT {t}f x`,
		`INCRBYFLOAT {t}f ""`, `INCRBYFLOAT {t}f " 1"`, `INCRBYFLOAT {t}f "1 "`, `INCRBYFLOAT {t}f 0x10`,
		`SET {t}g 1e308`, `INCRBYFLOAT {t}g 1e308`, `GET {t}g`, `SET {t}g abc`, `INCRBYFLOAT {t}g 1`,
		`SET {t}g 10`, `INCRBYFLOAT {t}g 0`, `SET {t}g 3.0`, `INCRBYFLOAT {t}g 0`, `SET {t}i inf`, `INCRBYFLOAT {t}i 1`,
		`SET {t}g 5`, `INCRBYFLOAT {t}g -5`, `INCRBYFLOAT {t}g 1.25`, `SET {t}h 0.1`, `INCRBYFLOAT {t}h 0.2`, `INCRBYFLOAT {t}h 1e-20`, `INCRBYFLOAT {t}h -0.3`,
	}},
	{"APPEND STRLEN", []string{
		`APPEND {t}a x`, `APPEND {t}a yz`, `GET {t}a`, `APPEND {t}a ""`, `APPEND {t}e ""`, `EXISTS {t}e`,
		`APPEND {t}a "\x00"`, `STRLEN {t}a`, `STRLEN {t}none`,
	}},
	{"GETRANGE", []string{
		`GETRANGE {t}k 0 -1`, `SET {t}k "Hello World"`, `GETRANGE {t}k 0 4`, `GETRANGE {t}k -5 -1`, `GETRANGE {t}k 0 -1`,
		`GETRANGE {t}k 5 3`, `GETRANGE {t}k -1 -5`, `GETRANGE {t}k 100 200`, `GETRANGE {t}k -100 -50`, `GETRANGE {t}k -100 2`,
		`GETRANGE {t}k 3 100`, `GETRANGE {t}k 0 0`, `GETRANGE {t}k -1 -1`, `GETRANGE {t}k x 1`, `GETRANGE {t}k 0 y`,
		`GETRANGE {t}k 9223372036854775807 -9223372036854775808`, `SUBSTR {t}k 0 2`,
		`SET {t}e ""`, `GETRANGE {t}e 0 -1`, `GETRANGE {t}e 0 0`,
	}},
	{"SETRANGE", []string{
		`SETRANGE {t}k 0 ""`, `EXISTS {t}k`, `SETRANGE {t}k 5 ""`, `EXISTS {t}k`, `SETRANGE {t}k 3 abc`, `GET {t}k`,
		`SETRANGE {t}k 1 X`, `GET {t}k`, `SETRANGE {t}k 10 Y`, `GET {t}k`, `SETRANGE {t}k -1 x`, `SETRANGE {t}k x x`,
		`SETRANGE {t}k 0 ""`, `SETRANGE {t}k 600000000 ""`, `SETRANGE {t}none 600000000 ""`, `EXISTS {t}none`, `SETRANGE {t}k 600000000 x`, `SETRANGE {t}k 9223372036854775807 x`,
	}},
	{"EXPIRE", []string{
		`EXPIRE {t}k 100`, `SET {t}k v`, `TTL {t}k`, `PTTL {t}k`, `EXPIRETIME {t}k`, `PEXPIRETIME {t}k`,
		`TTL {t}none`, `PTTL {t}none`, `EXPIRETIME {t}none`, `PEXPIRETIME {t}none`,
		`EXPIRE {t}k 100`, `~1 TTL {t}k`, `EXPIRE {t}k x`, `EXPIRE {t}k 1.5`, `EXPIRE {t}k 100 FOO`, `EXPIRE {t}k 100 NX XX`,
		`EXPIRE {t}k 100 GT LT`, `EXPIRE {t}k x FOO`, `EXPIRE {t}k 100 NX XX FOO`, `EXPIRE {t}k 100 LT GT NX`, `EXPIRE {t}k 100 NX GT`, `EXPIRE {t}k 100 XX XX`, `EXPIRE {t}k 100 NX NX`,
		`EXPIRE {t}k 9223372036854775807`, `EXPIRE {t}k -9223372036854775808`, `PEXPIRE {t}k 9223372036854775807`,
		`EXPIRE {t}k 9223372036854775`, `EXPIREAT {t}k 9223372036854775807`,
		`PERSIST {t}k`, `PERSIST {t}k`, `PERSIST {t}none`, `TTL {t}k`,
		`EXPIRE {t}k 100 XX`, `TTL {t}k`, `EXPIRE {t}k 100 NX`, `~1 TTL {t}k`, `EXPIRE {t}k 200 NX`, `~1 TTL {t}k`,
		`EXPIRE {t}k 200 XX`, `~1 TTL {t}k`, `EXPIRE {t}k 100 GT`, `EXPIRE {t}k 300 GT`, `~1 TTL {t}k`,
		`EXPIRE {t}k 400 LT`, `EXPIRE {t}k 50 LT`, `~1 TTL {t}k`, `PERSIST {t}k`,
		`EXPIRE {t}k 100 GT`, `TTL {t}k`, `EXPIRE {t}k 100 XX LT`, `EXPIRE {t}k 100 XX GT`, `EXPIRE {t}k 100 LT`, `~1 TTL {t}k`,
		`EXPIRE {t}k 200 XX GT`, `~1 TTL {t}k`, `EXPIRE {t}k 300 GT XX`, `~1 TTL {t}k`, `EXPIRE {t}k 100 XX XX GT`, `~1 TTL {t}k`,
		`PEXPIRE {t}k 200000`, `~2000 PTTL {t}k`, `EXPIREAT {t}k 4102444800`, `EXPIRETIME {t}k`,
		`PEXPIREAT {t}k 4102444800123`, `PEXPIRETIME {t}k`, `EXPIREAT {t}k 4102444800 GT`, `EXPIREAT {t}k 4102444801 GT`,
		`EXPIRETIME {t}k`, `EXPIRE {t}none 100`, `EXPIRE {t}none 100 XX`,
		`EXPIRE {t}k 0`, `EXISTS {t}k`, `SET {t}k v`, `EXPIRE {t}k -1`, `EXISTS {t}k`,
		`SET {t}k v`, `EXPIREAT {t}k 1`, `EXISTS {t}k`, `SET {t}k v`, `PEXPIREAT {t}k 0`, `GET {t}k`,
		`SET {t}k v`, `PEXPIRE {t}k -100`, `GET {t}k`,
	}},
	{"keyspace", []string{
		`SET {t}only v`, `KEYS {t}only`, `KEYS {t}nothing*`, `KEYS`, `KEYS a b`,
		`SCAN x`, `SCAN -1`, `SCAN 0 COUNT 0`, `SCAN 0 COUNT x`, `SCAN 0 FOO`, `SCAN 0 MATCH`, `SCAN`,
		`DBSIZE x`, `RANDOMKEY x`, `FLUSHDB`, `FLUSHALL`,
	}},
	{"server", []string{
		`CONFIG GET maxmemory`, `CONFIG GET maxmemory-policy`, `CONFIG GET timeout`, `CONFIG GET nosuch`,
		`CONFIG GET appendonly`, `CONFIG GET databases`, `CONFIG SET timeout 0`, `CONFIG`, `CONFIG GET`, `CONFIG FOO`, `CONFIG FOO bar`, `config get`,
		`COMMAND INFO nosuch`, `COMMAND FOO`,
	}},
	{"MULTI errors", []string{
		`EXEC`, `DISCARD`, `MULTI`, `MULTI`, `SET {t}a 1`, `EXEC`, `GET {t}a`,
		`MULTI`, `DISCARD`, `DISCARD`, `EXEC`,
	}},
	{"EXEC with arguments", []string{
		`SET {t}a 1`, `WATCH {t}a`, `MULTI`, `SET {t}a 2`, `EXEC x`, `EXEC`, `GET {t}a`,
		`MULTI`, `SET {t}a 3`, `EXEC`, `GET {t}a`,
	}},
	{"MULTI empty and UNWATCH", []string{
		`MULTI`, `EXEC`, `MULTI`, `UNWATCH`, `EXEC`,
	}},
	{"MULTI queued arity error", []string{
		`MULTI`, `SET {t}a 1`, `GET`, `SET {t}b 2`, `EXEC`, `EXISTS {t}a {t}b`, `EXEC`,
	}},
	{"MULTI queued unknown command", []string{
		`MULTI`, `SET {t}a 1`, `NOSUCH x`, `EXEC`, `EXISTS {t}a`,
	}},
	{"MULTI runtime errors", []string{
		`SET {t}s abc`, `MULTI`, `INCR {t}s`, `SET {t}a 1`, `INCR {t}a`, `GET {t}a`, `EXEC`,
	}},
	{"MULTI syntax error", []string{
		`MULTI`, `SET {t}a 1`, `SET {t}b 2 NX XX`, `INCRBY {t}c x`, `EXEC`, `MGET {t}a {t}b {t}c`,
	}},
	{"MULTI reads", []string{
		`MSET {t}a 1 {t}b 2`, `MULTI`, `GET {t}a`, `MGET {t}a {t}b {t}c`, `EXISTS {t}a {t}c`, `TTL {t}a`, `EXEC`,
	}},
	{"MULTI with PING", []string{`MULTI`, `PING`, `EXEC`}},
	{"WATCH", []string{
		`WATCH`, `SET {t}a 1`, `WATCH {t}a {t}b`, `MULTI`, `WATCH {t}a`, `SET {t}a 2`, `EXEC`, `GET {t}a`,
		`WATCH {t}a`, `UNWATCH`, `MULTI`, `INCR {t}a`, `EXEC`,
		`WATCH {t}a`, `MULTI`, `DISCARD`, `UNWATCH x`,
	}},
	{"RESET QUIT", []string{`MULTI`, `RESET`, `EXEC`, `RESET x`, `QUIT`}},
	{"server and connection edges", []string{
		`^ HELLO`, `^ HELLO 2`, `HELLO 3 AUTH default`, `HELLO 3 SETNAME`, `^ HELLO 3 SETNAME a AUTH default x`, `CLIENT GETNAME`, `HELLO 2 SETNAME "a b"`,
		`^ CLIENT INFO`, `^ CLIENT ID`, `^ COMMAND COUNT`, `^ DBSIZE`, `INFO nosuch`, `SELECT 00`, `SELECT +0`, `SELECT " 0"`, `SELECT 99999999999999999999`,
		`CONFIG GET save`, `CONFIG GET maxclients`, `CONFIG GET timeout x`, `CONFIG GET ""`, `CONFIG GET MAXMEMORY`, `@ CONFIG GET TIMEOUT timeout`,
		`@ CONFIG GET timeout TIMEOUT`, `@ CONFIG GET TIMEOU?`, `@ CONFIG GET Maxmemory-Policy MAXMEMORY-P*`, `@ CONFIG GET maxmemory-p* MAXMEMORY-POLICY`,
		`COMMAND DOCS get`, `PING "\x00"`, `ECHO "\xff"`, `COMMAND HELP x`, `CLIENT HELP x`, `CONFIG HELP x`, `CLIENT SETINFO lib-name x`,
		`GETEX {t}k PERSIST`, `SET {t}k v`, `GETEX {t}k EX 100 PERSIST`, `EXPIRE {t}k 100 NX GT`, `EXPIRE {t}k 100 nx gt lt`, `PEXPIRE {t}k 100 XX LT FOO`,
		`TTL {t}k`, `PERSIST {t}k x`, `PERSIST`, `TYPE {t}k`, `RANDOMKEY x`, `DBSIZE x`,
		`SET {t}k v EX 10 PX`, `SET {t}k v GET EX 10 NX XX`, `SET {t}k v NX GET EX 0`, `SETNX {t}k`, `GETDEL {t}k x`, `MSETNX {t}a 1 {t}a`,
		`MULTI`, `MULTI`, `QUIT`,
	}},
	{"expiry kept or cleared", []string{
		`SET {t}k v EX 100`, `APPEND {t}k x`, `~1 TTL {t}k`, `SETRANGE {t}k 0 y`, `~1 TTL {t}k`, `SET {t}n 1 EX 100`, `INCR {t}n`, `~1 TTL {t}n`,
		`INCRBYFLOAT {t}n 1.5`, `~1 TTL {t}n`, `DECRBY {t}n 1`, `~1 TTL {t}n`, `SETNX {t}k z`, `~1 TTL {t}k`, `MSETNX {t}k z`, `~1 TTL {t}k`,
		`MSET {t}k z`, `TTL {t}k`, `SET {t}k v EX 100`, `GETEX {t}k`, `~1 TTL {t}k`, `GETDEL {t}k`, `TTL {t}k`, `SET {t}k v PX 100000`,
		`SET {t}k w KEEPTTL GET`, `~2000 PTTL {t}k`, `SET {t}k w XX KEEPTTL`, `~1 TTL {t}k`, `SET {t}k w NX EX 10`, `~1 TTL {t}k`,
		`EXPIRE {t}none 0`, `PEXPIRE {t}none -1`, `SET {t}k v EXAT 1`, `TTL {t}k`, `PTTL {t}k`, `EXPIRETIME {t}k`, `SET {t}k v EX 1 NX`, `TTL {t}k`,
	}},
	{"INCRBYFLOAT formatting", []string{
		`SET {t}f 0.00000000000000001`, `INCRBYFLOAT {t}f 0`, `INCRBYFLOAT {t}s 1e-18`, `INCRBYFLOAT {t}s -1e-18`, `INCRBYFLOAT {t}m -0.000000000000000001`,
		`GET {t}m`, `SET {t}g 1.10`, `INCRBYFLOAT {t}g 0`, `SET {t}g 100`, `INCRBYFLOAT {t}g 0.5`, `INCRBYFLOAT {t}g -100.5`, `SET {t}g 1e2`, `INCRBYFLOAT {t}g 1e-2`,
		`SET {t}g 123456789.123456789`, `INCRBYFLOAT {t}g 0`, `SET {t}g 0.1`, `INCRBYFLOAT {t}g 0.7`, `INCRBYFLOAT {t}g 1.2345678901234567`,
		`SET {t}g 9007199254740993`, `INCRBYFLOAT {t}g 0`, `INCRBYFLOAT {t}g 1`, `SET {t}g -1.5e-7`, `INCRBYFLOAT {t}g 0`, `SET {t}g 1.5e+3`, `INCRBYFLOAT {t}g 0`,
		`SET {t}g 3.0e0`, `INCRBYFLOAT {t}g -3`, `SET {t}g 0.1e1`, `INCRBYFLOAT {t}g .1`, `SET {t}g +.5`, `INCRBYFLOAT {t}g -.5`, `SET {t}g 5e-324`, `INCRBYFLOAT {t}g 0`,
	}},
	{"WATCH own writes and RESP3 nulls", []string{
		`SET {t}a 1`, `WATCH {t}a`, `SET {t}a 2`, `MULTI`, `GET {t}a`, `EXEC`, `WATCH {t}a`, `DEL {t}a`, `MULTI`, `EXEC`,
		`WATCH {t}none`, `SET {t}none x`, `MULTI`, `EXEC`, `WATCH {t}none2`, `MULTI`, `GET {t}none2`, `MGET {t}none2 {t}none`, `EXEC`,
		`MGET {t}x {t}y`, `GETEX {t}x`, `GETDEL {t}x`, `GETSET {t}x 1`, `SET {t}y 1 GET`, `SET {t}z 1 NX GET`, `SET {t}z 2 NX GET`,
		`CLIENT GETNAME`, `GETRANGE {t}x 5 1`,
	}},
	{"inline commands", []string{
		`> ECHO "a b"`, `> ECHO 'a\'b'`, `> ECHO "\x41\x4a"`, `> ECHO "\t\n\r\b\a\\"`, `> ECHO "\x4"`, `> ECHO "\xzz"`, `> ECHO 'a\nb'`,
		`> ECHO a   b`, `>    PING   `, `> pInG x`, `> SET {t}k "x y"`, `> GET {t}k`, `> ECHO ""`, `> ECHO ''`, `> ECHO "\u0041"`,
		"> ECHO \"a\tb\"", "> ECHO a\tb", `> ECHO "a"`, `> NOSUCH a "b c"`,
		`! > ECHO "a"b`,
	}},
	{"inline unbalanced quotes", []string{`! > ECHO "a`}},
	{"inline unbalanced single quote", []string{`> ECHO 'a'`, `! > ECHO 'a'b`}},
	{"INFO shapes, RESET, QUIT in MULTI", []string{
		`^ INFO server`, `^ INFO`, `^ INFO keyspace`, `^ CLIENT LIST`, `^ INFO server clients`, `INFO nosuch other`,
		`KEYS ""`, `SCAN 0 MATCH "" COUNT 100000`, `SCAN 0 MATCH {t}* COUNT 100000 TYPE hash`,
		`CLIENT SETNAME a`, `SET {t}w 1`, `WATCH {t}w`, `^ HELLO 3`, `RESET`, `CLIENT GETNAME`, `GET {t}none`, `MULTI`, `EXEC`,
		`MULTI`, `SET {t}a 1`, `RESET`, `EXISTS {t}a`, `MULTI`, `ECHO x`, `DISCARD`,
		`MULTI`, `WATCH {t}a`, `EXEC`, `MULTI`, `UNWATCH x`, `EXEC`, `MULTI`, `SET {t}a 1`, `QUIT`,
	}},
	{"HELLO option order", []string{
		// Redis 7.0 answers the first bad option as it reads them: a wrong
		// AUTH, a bad name, an unknown option; nothing is set.
		`HELLO 3 AUTH nobody x SETNAME "a b"`, `HELLO 3 SETNAME "a b" FOO`, `HELLO 3 AUTH default x FOO`, `HELLO 3 SETNAME ok FOO`, `CLIENT GETNAME`,
		`HELLO 3 AUTH nobody x FOO`, `HELLO 3 FOO SETNAME "a b"`, `HELLO 3 SETNAME "a b" AUTH nobody x`, `HELLO 3 AUTH nobody x AUTH default x`, `GET {t}none`,
		`^ HELLO`, `GET {t}none`,
	}},
	{"SCAN KEYS and numbers edges", []string{
		`SET {t}x 1`, `SCAN 0 MATCH {t}x COUNT 9223372036854775807`, `SCAN 0 MATCH {t}x COUNT 9223372036854775808`, `SCAN 0 MATCH {t}x MATCH`,
		`SCAN 0 MATCH {t}x COUNT 100000 TYPE string TYPE none`, `SCAN 0 MATCH {t}x COUNT 10 COUNT 100000`, `SCAN 0 MATCH {t}x COUNT 100000 TYPE ""`,
		`SCAN 0 MATCH {t}x COUNT 100000 type String`, `SCAN 0 COUNT 100000 MATCH {t}[\x]`, `KEYS {t}[\x]`, `KEYS {t}[x\]`, `KEYS {t}\x`, `KEYS {t}x\`,
		`KEYS {t}[^]x`, `KEYS {t}[^x`, `KEYS {t}[x-`, `KEYS {t}?`, `KEYS {t}??`, `KEYS {t}*x*`, `KEYS {t}***`, `KEYS {t}[[]x`,
		`EXISTS {t}x {t}x {t}x {t}x {t}x {t}x {t}x {t}x {t}x {t}x`, `TYPE {t}x`, `SELECT 0`, `ECHO "\x00\x01\xfe\xff"`,
		`SET {t}x 10 GET`, `INCRBY {t}x 5`, `APPEND {t}x 5`, `INCR {t}x`, `GETRANGE {t}x -2 -1`, `SETRANGE {t}x 0 9`, `DECR {t}x`,
		`SET {t}y " "`, `INCRBYFLOAT {t}y 1`, `SET {t}y "1e+2"`, `INCRBYFLOAT {t}y 1`, `SET {t}y "1.e2"`, `INCRBYFLOAT {t}y 1`,
	}},
	{"HELLO AUTH without a password", []string{
		// A node without --auth-token-file is a Redis whose default user
		// has no password: "default" with any password logs in (go-redis
		// sends HELLO 3 AUTH default pw when given a password), another
		// user is refused. GET shows the protocol the HELLO chose.
		`^ HELLO 3 AUTH default x`, `GET {t}none`, `HELLO 2 AUTH nobody x`, `GET {t}none`, `^ HELLO 2 AUTH default "" SETNAME me`,
		`GET {t}none`, `CLIENT GETNAME`, `HELLO 3 AUTH nobody x SETNAME you`, `CLIENT GETNAME`, `AUTH nobody x`, `AUTH x`,
	}},
	{"SET options edges", []string{
		`SET {t}k v EX 10 PXAT 100`, `SET {t}k v PX 10 KEEPTTL`, `SET {t}k v EXAT 10 KEEPTTL`, `SET {t}k v PXAT 0`, `SET {t}k v EXAT -1`,
		`SET {t}k v PX -1`, `SET {t}k v PX 1.5`, `SET {t}k v PX 9223372036854775806`, `SET {t}k v EXAT 9223372036854775807`,
		`SET {t}k v PXAT 9223372036854775807`, `SET {t}k v EX ""`, `SET {t}k v EX " 10"`, `SET {t}k v EX 10x`,
		`SET {t}k v EX 9223372036854775808`, `SET {t}k v EX -9223372036854775808`, `SET {t}k v KEEPTTL KEEPTTL`,
		`SET {t}k v GET EX`, `SET {t}k v NX EX 10 XX`, `SET {t}k v ex 10 nx`, `~1 TTL {t}k`, `SET {t}k w ex 10 nx GET`, `GET {t}k`,
		`SET {t}k v EX 010`, `~1 TTL {t}k`, `SET {t}k v EX +20`, `~1 TTL {t}k`, `SET {t}k w XX GET KEEPTTL`, `~1 TTL {t}k`,
		`SET {t}k "" XX`, `GET {t}k`, `SET {t}k v PXAT 1`, `EXISTS {t}k`, `SET {t}k v EXAT 1 GET`, `SET {t}k v XX EXAT 1 GET`, `EXISTS {t}k`,
		`SET {t}k`, `SET {t}k v EX 10 x`, `SET {t}k v EXAT`, `SET {t}k v PXAT`,
	}},
	{"GETEX GETDEL GETSET edges", []string{
		`GETEX {t}none PERSIST`, `GETEX {t}none EX 10`, `GETEX {t}none EX 0`, `GETEX {t}none FOO`, `EXISTS {t}none`,
		`SET {t}k v`, `GETEX {t}k PXAT 0`, `EXISTS {t}k`, `SET {t}k v`, `GETEX {t}k EXAT -1`, `EXISTS {t}k`,
		`SET {t}k v`, `GETEX {t}k PX 0`, `GETEX {t}k PX -1`, `GETEX {t}k EX 10 EXAT 20`, `GETEX {t}k persist`, `GETEX {t}k ex 100`, `~1 TTL {t}k`,
		`GETEX {t}k EX 9223372036854775`, `GETEX {t}k EXAT 9223372036854775807`, `GETEX {t}k PXAT 9223372036854775807`, `GETEX {t}k EX " 1"`,
		`GETEX {t}k EX 1.5`, `GETEX {t}k PERSIST x`, `GETEX {t}k EX 10 PERSIST`,
		`SET {t}g v EX 100`, `GETSET {t}g w`, `TTL {t}g`, `GETSET {t}g ""`, `GET {t}g`, `GETDEL {t}g`, `GETDEL {t}g`,
	}},
	{"SETNX SETEX PSETEX edges", []string{
		`SETEX {t}e 1.5 v`, `SETEX {t}e "" v`, `SETEX {t}e 0100 v`, `~1 TTL {t}e`, `SETEX {t}e +100 v`, `SETEX {t}e -9223372036854775808 v`,
		`SETEX {t}e 9223372036854776 v`, `SETEX {t}e 100 ""`, `GET {t}e`,
		`PSETEX {t}p -1 v`, `PSETEX {t}p 9223372036854775807 v`, `PSETEX {t}p x v`, `PSETEX {t}p "" v`, `PSETEX {t}p 1 v`,
		`SETNX {t}k ""`, `SETNX {t}k x`, `GET {t}k`, `SETNX {t}k`, `SETEX {t}k 10`, `PSETEX {t}k 10`,
	}},
	{"MGET MSETNX edges", []string{
		`MGET {t}x`, `MGET {t}x {t}y {t}x`, `MSETNX`, `MSET`, `MSETNX {t}a "" {t}b ""`, `MGET {t}a {t}b {t}x`,
		`MSETNX {t}x 1 {t}a 2`, `MGET {t}x {t}a`, `MSET {t}a 1 {t}b 2 {t}c`,
	}},
	{"INCR edges", []string{
		`INCRBY {t}n -9223372036854775808`, `DECR {t}n`, `INCRBY {t}n 9223372036854775807`, `INCR {t}n`, `INCRBY {t}n -1`,
		`INCRBY {t}m 9223372036854775807`, `INCRBY {t}m 1`, `DECRBY {t}m -1`, `DECRBY {t}z -9223372036854775807`, `DECRBY {t}z 1`,
		`INCRBY {t}n -0`, `INCRBY {t}n 00`, `INCRBY {t}n "-"`, `INCRBY {t}n "1\x00"`, `INCRBY {t}n 9223372036854775808`,
		`INCRBY {t}n -9223372036854775809`, `DECRBY {t}n x`, `DECRBY {t}n ""`,
		`SET {t}s "+1"`, `INCR {t}s`, `SET {t}s "1 "`, `INCR {t}s`, `SET {t}s 9223372036854775808`, `INCR {t}s`,
		`SET {t}s -9223372036854775809`, `DECR {t}s`, `SET {t}s "-"`, `INCR {t}s`, `SET {t}s 0`, `INCRBY {t}s -9223372036854775808`,
		`DECR {t}s`, `SET {t}s -00`, `INCR {t}s`, `SET {t}s 1e3`, `INCR {t}s`, `SET {t}s "\x001"`, `INCR {t}s`,
		`SET {t}s -9223372036854775808`, `DECRBY {t}s 1`, `INCRBY {t}s -1`, `GET {t}s`,
	}},
	{"INCRBYFLOAT edges", []string{
		`INCRBYFLOAT {t}f 1e400`, `GET {t}f`, `INCRBYFLOAT {t}a 1.0e-5`, `INCRBYFLOAT {t}a 3.0000000000000001`, `INCRBYFLOAT {t}z -0`,
		`INCRBYFLOAT {t}z2 -0.0`, `INCRBYFLOAT {t}b 1.7976931348623157e308`, `INCRBYFLOAT {t}c +1`, `INCRBYFLOAT {t}c .5`, `INCRBYFLOAT {t}c 5.`,
		`INCRBYFLOAT {t}c 1e`, `INCRBYFLOAT {t}c infinity`, `INCRBYFLOAT {t}c NaN`, `INCRBYFLOAT {t}c 1_0`, `INCRBYFLOAT {t}c -.5e1`, `GET {t}c`,
		`SET {t}x 1.5e3`, `INCRBYFLOAT {t}x 0`, `SET {t}x "  1.5"`, `INCRBYFLOAT {t}x 1`, `SET {t}x "1.5 "`, `INCRBYFLOAT {t}x 1`,
		`SET {t}y 123456789012345678901234567890`, `INCRBYFLOAT {t}y 1`, `INCRBYFLOAT {t}y 1e-30`, `INCRBYFLOAT {t}y -123456789012345678901234567890`,
		`SET {t}w 0.1`, `INCRBYFLOAT {t}w 0.1`, `INCRBYFLOAT {t}w 0.1`, `INCRBYFLOAT {t}w 1e-10`, `INCRBYFLOAT {t}w 1e10`, `INCRBYFLOAT {t}w 1e20`,
		`SET {t}v 1e-300`, `INCRBYFLOAT {t}v 0`, `INCRBYFLOAT {t}v 1e-5000`, `SET {t}u 9223372036854775807`, `INCRBYFLOAT {t}u 1`,
		`SET {t}u -1.50`, `INCRBYFLOAT {t}u 0.25`, `SET {t}u ""`, `INCRBYFLOAT {t}u 1`, `SET {t}u 1`, `INCRBYFLOAT {t}u 1e4932`,
		`SET {t}u 1e308`, `INCRBYFLOAT {t}u 1e308`, `INCRBYFLOAT {t}u -1.5e308`, `SET {t}u 1e4000`, `INCRBYFLOAT {t}u 1`,
		`SET {t}u 1e5000`, `INCRBYFLOAT {t}u 1`, `SET {t}q 1e-5000`, `INCRBYFLOAT {t}q 1`, `INCRBYFLOAT {t}u 1e-400`, `INCRBYFLOAT {t}u 0e-5000`,
		`INCRBYFLOAT {t}u 1E2`, `INCRBYFLOAT {t}u INF`, `INCRBYFLOAT {t}u 1__0`, `INCRBYFLOAT {t}u _1`,
		`SET {t}u 1`, `INCRBYFLOAT {t}u INF`, `INCRBYFLOAT {t}u -Infinity`, `INCRBYFLOAT {t}none inf`, `EXISTS {t}none`, `GET {t}u`,
		`SET {t}u -inf`, `INCRBYFLOAT {t}u inf`, `SET {t}u 1e4000`, `INCRBYFLOAT {t}u inf`, `SET {t}u 1e-5000`, `INCRBYFLOAT {t}u inf`,
		`SET {t}u " 1"`, `INCRBYFLOAT {t}u inf`, `SET {t}u ""`, `INCRBYFLOAT {t}u inf`, `SET {t}u 0e-9999`, `INCRBYFLOAT {t}u inf`,
		`SET {t}u --inf`, `INCRBYFLOAT {t}u inf`, `SET {t}u 1_0`, `INCRBYFLOAT {t}u inf`, `SET {t}u 1e`, `INCRBYFLOAT {t}u inf`,
		`MULTI`, `INCRBYFLOAT {t}u inf`, `SET {t}u 2`, `INCRBYFLOAT {t}u inf`, `EXEC`,
	}},
	{"APPEND GETRANGE SETRANGE edges", []string{
		`SET {t}k abcdef`, `GETRANGE {t}k 0 -100`, `GETRANGE {t}k -100 -100`, `GETRANGE {t}k -6 -6`, `GETRANGE {t}k -7 0`, `GETRANGE {t}k 5 5`,
		`GETRANGE {t}k 6 6`, `GETRANGE {t}k 2 -3`, `GETRANGE {t}k 2 -5`, `GETRANGE {t}none 5 3`, `GETRANGE {t}none 0 -1`, `GETRANGE {t}k "" 1`,
		`GETRANGE {t}k 0 9223372036854775808`, `GETRANGE {t}k -9223372036854775808 -1`, `SUBSTR {t}k -3 -1`,
		`SETRANGE {t}k -1 ""`, `SETRANGE {t}k 9223372036854775808 x`, `SETRANGE {t}k 6 gh`, `GET {t}k`, `SETRANGE {t}k 0 "\x00"`, `GET {t}k`,
		`SETRANGE {t}k 536870912 x`, `SETRANGE {t}k 536870912 ""`, `SETRANGE {t}none 536870912 ""`, `SETRANGE {t}k "" x`,
		`APPEND {t}n ""`, `STRLEN {t}n`, `EXISTS {t}n`, `APPEND {t}n "\x00\xff"`, `STRLEN {t}n`, `SET {t}e ""`, `STRLEN {t}e`, `APPEND {t}e ""`,
	}},
	{"EXPIRE edges", []string{
		`SET {t}k v`, `EXPIRE {t}k 100 GT`, `TTL {t}k`, `EXPIRE {t}k 100 LT`, `~1 TTL {t}k`, `PERSIST {t}k`, `PEXPIRE {t}k 100000 nx`, `~2000 PTTL {t}k`,
		`EXPIRE {t}k 50 gt gt`, `EXPIRE {t}k 200 lt lt`, `EXPIRE {t}k 200 gt gt`, `EXPIRE {t}k 100 lt lt`, `~1 TTL {t}k`, `EXPIRE {t}k ""`, `EXPIRE {t}k " 1"`,
		`EXPIRE {t}none 100 NX`, `EXPIRE {t}none 100 GT`, `EXPIRE {t}none 100 LT`, `PERSIST {t}none`,
		`EXPIRE {t}k -9223372036854775807`, `EXISTS {t}k`, `SET {t}k v`, `PEXPIRE {t}k -9223372036854775808`, `EXISTS {t}k`,
		`SET {t}k v`, `EXPIREAT {t}k -1`, `EXISTS {t}k`, `SET {t}k v`, `PEXPIREAT {t}k 9223372036854775807`, `~5 TTL {t}k`, `~5000 PTTL {t}k`, `PEXPIRETIME {t}k`,
		`PEXPIREAT {t}k 9223372036854775806 GT`, `PEXPIRETIME {t}k`, `EXPIREAT {t}k 9223372036854775`, `EXPIRETIME {t}k`, `EXPIREAT {t}k 9223372036854776`,
		`PEXPIRE {t}k 9223372036854775806`, `EXPIRE {t}k 9223372036854776`, `EXPIRE {t}k 100 XX GT LT`, `EXPIRE {t}k 100 NX LT`,
		`EXPIRE {t}k 0 GT`, `EXISTS {t}k`, `EXPIRE {t}k 0 LT`, `EXISTS {t}k`, `SET {t}k v EX 100`, `EXPIRE {t}k -1 NX`, `EXISTS {t}k`, `EXPIRE {t}k -1 XX`, `EXISTS {t}k`,
	}},
	{"keys and scan", []string{
		`SET {t}a1 x`, `SET {t}b1 x`, `SET {t}c1 x`, `SET {t}a*b x`, `SET {t}]1 x`, `SET {t}^1 x`, `SET {t}a\b x`,
		`KEYS {t}[a]1`, `@ KEYS {t}[^ab]1`, `KEYS {t}[c-c]1`, `KEYS {t}[c-d]1`, `KEYS {t}[d-c]1`, `KEYS {t}a\*b`, `KEYS {t}a\b`, `KEYS {t}a\\b`,
		`KEYS {t}[\]]1`, `KEYS {t}[]]1`, `KEYS {t}[\^]1`, `KEYS {t}[^^]1x`, `KEYS {t}?1x`, `KEYS {t}a[`, `KEYS {t}a*b\`, `KEYS {t}a[*`,
		`KEYS {t}a1*`, `KEYS {t}*[`, `KEYS {t}[a-]1`, `KEYS {t}[-a]1`, `KEYS {t}[!a]1`,
		`TYPE {t}a1`, `TYPE {t}none`, `EXISTS {t}a1 {t}a1 {t}a1`, `DEL {t}a1 {t}a1`, `UNLINK {t}b1 {t}c1 {t}b1`, `UNLINK {t}none`,
		`SCAN 0 MATCH {t}]1 COUNT 100000`, `SCAN 0 MATCH {t}]1 COUNT 100000 TYPE string`, `SCAN 0 MATCH {t}]1 COUNT 100000 TYPE list`,
		`SCAN 0 MATCH {t}]1 COUNT 100000 TYPE STRING`, `SCAN 0 TYPE`, `SCAN 0 COUNT -1`, `SCAN 0 COUNT 1.5`, `SCAN 18446744073709551616`,
		`SCAN 1.5`, `SCAN "" MATCH {t}]1 COUNT 100000`, `SCAN +0 MATCH {t}]1 COUNT 100000`, `SCAN + MATCH {t}]1`, `SCAN " 0"`,
		`SCAN 0 MATCH {t}]1 MATCH {t}^1 COUNT 100000`, `SCAN 0 count 100000 match {t}^1`, `SCAN 0 MATCH {t}[a-]1 COUNT 100000`,
		`@ KEYS {t}[^ab]1`, `@ KEYS {t}[]-a]1`, `@ KEYS {t}[a-]`, `@ KEYS {t}[a-]1]`, `@ KEYS {t}[\]-a]1`, `@ KEYS {t}[A-C]1`,
	}},
	{"MULTI edges", []string{
		`MULTI`, `GETEX {t}a FOO`, `SETRANGE {t}a -1 x`, `SET {t}a 1 EX 0`, `INCRBYFLOAT {t}a x`, `SET {t}b 1`, `EXEC`, `GET {t}b`,
		`MULTI`, `NOSUCH`, `DISCARD`, `EXEC`, `MULTI`, `GET`, `GET {t}a`, `EXEC`, `EXEC`,
		`WATCH {t}w`, `MULTI`, `EXEC`, `MULTI`, `MULTI`, `MULTI`, `DISCARD`,
		`MULTI`, `SET {t}c 1`, `WATCH`, `EXEC`, `MULTI`, `MSET {t}d`, `EXEC`,
	}},
	{"WATCH across connections", []string{
		// "& " steps run on a second connection, to another Concord node.
		`SET {t}a 1`, `WATCH {t}a`, `& SET {t}a 2`, `MULTI`, `SET {t}a 3`, `EXEC`, `GET {t}a`,
		`WATCH {t}a`, `& DEL {t}a`, `MULTI`, `SET {t}a 3`, `EXEC`, `EXISTS {t}a`,
		`WATCH {t}a`, `& SET {t}a 4`, `MULTI`, `SET {t}a 5`, `EXEC`, `GET {t}a`,
		`WATCH {t}n {t}a`, `& SET {t}other 1`, `MULTI`, `GET {t}a`, `EXEC`,
		`WATCH {t}a`, `& MULTI`, `& SET {t}a 6`, `MULTI`, `SET {t}a 7`, `& EXEC`, `EXEC`, `GET {t}a`,
		`WATCH {t}a`, `& MULTI`, `& SET {t}a 8`, `MULTI`, `SET {t}a 9`, `EXEC`, `& EXEC`, `GET {t}a`,
		`WATCH {t}a`, `& SET {t}a 10`, `UNWATCH`, `MULTI`, `SET {t}a 11`, `EXEC`, `GET {t}a`,
		`WATCH {t}a`, `& SET {t}a 12`, `MULTI`, `UNWATCH`, `SET {t}a 13`, `EXEC`, `GET {t}a`,
		`WATCH {t}a`, `& SET {t}a 14`, `MULTI`, `DISCARD`, `MULTI`, `SET {t}a 15`, `EXEC`, `GET {t}a`,
		`WATCH {t}a`, `& SET {t}a 16`, `MULTI`, `GET`, `EXEC`, `MULTI`, `SET {t}a 17`, `EXEC`,
		`WATCH {t}a`, `& SET {t}a 18`, `MULTI`, `INCRBY {t}a x`, `EXEC`,
		`WATCH {t}a`, `& SET {t}a 19`, `RESET`, `MULTI`, `SET {t}a 20`, `EXEC`,
		`WATCH {t}a`, `WATCH {t}a`, `& SET {t}a 21`, `MULTI`, `EXEC`,
		`WATCH {t}a`, `& SET {t}a 22`, `WATCH {t}b`, `MULTI`, `EXEC`, `GET {t}a`,
		`WATCH {t}a`, `& SET {t}a 23`, `MULTI`, `EXEC x`, `MULTI`, `SET {t}a 24`, `EXEC`, `GET {t}a`,
		`MULTI`, `& GET {t}a`, `& MULTI`, `& EXEC`, `SET {t}a 25`, `EXEC`, `& GET {t}a`,
	}},
	{"WATCH a write of the same value", []string{
		`SET {t}a 1`, `WATCH {t}a`, `& SET {t}a 1`, `MULTI`, `SET {t}a 2`, `EXEC`, `SET {t}a 3`, `GET {t}a`,
	}},
	{"WATCH a new expiry", []string{
		`SET {t}a 1`, `WATCH {t}a`, `& EXPIRE {t}a 100`, `MULTI`, `SET {t}a 2`, `EXEC`, `SET {t}a 3`, `GET {t}a`,
	}},
	{"WATCH a change and a change back", []string{
		`WATCH {t}a`, `& SET {t}a 1`, `& DEL {t}a`, `MULTI`, `GET {t}a`, `EXEC`,
	}},
	{"MULTI state", []string{
		`MULTI`, `MULTI x`, `EXEC`, `MULTI`, `DISCARD x`, `EXEC`, `MULTI`, `WATCH`, `DISCARD`, `MULTI`, `EXEC x`, `EXEC`,
		`MULTI`, `SET {t}a 1`, `UNWATCH`, `UNWATCH`, `GET {t}a`, `EXEC`,
		`MULTI`, `SET {t}a 4`, `QUIT x`,
	}},
	{"EXEC op failures", []string{
		`SET {t}s abc`, `SET {t}n 1`, `MULTI`, `INCR {t}s`, `INCR {t}n`, `APPEND {t}s x`, `INCRBYFLOAT {t}s 1`, `GETRANGE {t}n 0 -1`,
		`SET {t}n 5 GET`, `EXEC`, `MGET {t}s {t}n`, `SET {t}big 9223372036854775807`, `MULTI`, `INCR {t}big`, `SET {t}z 1`, `DECR {t}z`, `EXEC`,
	}},
	{"handshake", []string{
		`HELLO 2 AUTH`, `HELLO 2 AUTH default`, `HELLO 2 SETNAME`, `HELLO 0`, `HELLO -1`, `HELLO 1`, `HELLO 2x`,
		`HELLO 3 SETNAME "a b"`, `HELLO 2 FOO bar`, `HELLO 99999999999999999999`, `AUTH a b`, `AUTH a b c`, `AUTH default ""`, `AUTH default x`, `AUTH DEFAULT x`, `HELLO 2 AUTH nobody x`,
		`CLIENT SETNAME ""`, `CLIENT GETNAME`, `CLIENT SETNAME "a\nb"`, `CLIENT SETNAME "\x7f"`, `CLIENT SETNAME "é"`, `CLIENT GETNAME`,
		`CLIENT LIST x`, `CLIENT LIST TYPE x`, `CLIENT LIST ID x`, `CLIENT ID x`, `client getname x`, `client setname`,
		`CLIENT LIST TYPE master`, `CLIENT LIST type PubSub`, `CLIENT LIST TYPE replica`, `CLIENT LIST TYPE slave`, `CLIENT LIST ID 99999999`,
		`CLIENT LIST ID`, `CLIENT LIST TYPE normal x`, `CLIENT LIST ID 99999999 x`, `CLIENT LIST ID 1.5`, `CLIENT LIST TYPE`, `CLIENT LIST TYPE "x\x00y"`,
		`COMMAND COUNT x`, `COMMAND INFO get`, `COMMAND INFO nosuch`, `COMMAND INFO nosuch nosuch2`, `COMMAND DOCS nosuch`, `COMMAND LIST x`,
		`COMMAND LIST FILTERBY PATTERN get`, `COMMAND LIST FILTERBY PATTERN GETR*`, `COMMAND LIST filterby pattern [p]ttl`, `COMMAND LIST FILTERBY MODULE x`,
		`COMMAND LIST FILTERBY ACLCAT nosuch`, `COMMAND LIST FILTERBY FOO x`, `COMMAND LIST FILTERBY PATTERN`, `COMMAND LIST FILTERBY PATTERN a FILTERBY PATTERN b`,
		`COMMAND LIST FILTERBY PATTERN get x`, `COMMAND LIST PATTERN get`,
		`@ CONFIG GET maxmemory timeout`, `@ CONFIG GET maxmemory maxmemory`, `CONFIG GET maxmemor*`, `CONFIG SET`, `CONFIG SET x`, `CONFIG RESETSTAT x`, `CONFIG help x`,
		`ECHO ""`, `PING ""`, `QUIT x`,
	}},
}

// arityChecks are each command of docs/redis.md with too few arguments and,
// where its arity is fixed, one too many.
func arityChecks() []string {
	var out []string
	for _, name := range []string{
		"GET", "SET", "SETNX", "SETEX", "PSETEX", "GETSET", "GETDEL", "GETEX", "MGET", "MSET", "MSETNX",
		"INCR", "INCRBY", "INCRBYFLOAT", "DECR", "DECRBY", "APPEND", "STRLEN", "GETRANGE", "SUBSTR", "SETRANGE",
		"DEL", "UNLINK", "EXISTS", "TYPE", "EXPIRE", "PEXPIRE", "EXPIREAT", "PEXPIREAT", "TTL", "PTTL",
		"EXPIRETIME", "PEXPIRETIME", "PERSIST", "SCAN", "KEYS", "ECHO", "AUTH", "SELECT", "CLIENT", "CONFIG",
		"WATCH",
	} {
		out = append(out, name)
	}
	for _, line := range []string{
		"GET {t}a b", "SETNX {t}a b c", "SETEX {t}a 1 b c", "PSETEX {t}a 1 b c", "GETSET {t}a b c", "GETDEL {t}a b",
		"INCR {t}a b", "INCRBY {t}a 1 2", "INCRBYFLOAT {t}a 1 2", "DECR {t}a b", "DECRBY {t}a 1 2", "APPEND {t}a b c",
		"STRLEN {t}a b", "GETRANGE {t}a 0 1 2", "SUBSTR {t}a 0 1 2", "SETRANGE {t}a 0 b c", "TYPE {t}a b",
		"TTL {t}a b", "PTTL {t}a b", "EXPIRETIME {t}a b", "PEXPIRETIME {t}a b", "PERSIST {t}a b",
		"EXPIRE {t}a", "PEXPIRE {t}a", "EXPIREAT {t}a", "PEXPIREAT {t}a",
		"ECHO a b", "SELECT 0 1", "DBSIZE x", "RANDOMKEY x", "MULTI x", "EXEC x", "DISCARD x", "UNWATCH x",
	} {
		out = append(out, line)
	}
	return out
}

// runDiffScript runs s on a new connection to each server and compares
// every reply.
//
// A step prefixed "& " runs on a second connection of the script, opened
// at its first such step: to redis-server, and to otherAddr, another
// Concord node, so that what one connection does to another's
// transaction or watched keys is compared too.
func runDiffScript(t *testing.T, s diffScript, proto int, tag, redisAddr, concordAddr, otherAddr string) {
	t.Helper()
	rc, cc := dialDiffProto(t, redisAddr, proto), dialDiffProto(t, concordAddr, proto)
	defer rc.close()
	defer cc.close()
	var rc2, cc2 *diffConn // the second connection's, once a step needs them
	defer func() {
		if rc2 != nil {
			rc2.close()
			cc2.close()
		}
	}()
	for _, step := range s.steps {
		rc, cc := rc, cc
		if rest, ok := strings.CutPrefix(step, "& "); ok {
			if rc2 == nil {
				rc2, cc2 = dialDiffProto(t, redisAddr, proto), dialDiffProto(t, otherAddr, proto)
			}
			rc, cc, step = rc2, cc2, rest
		}
		mode, line := parseStepMode(t, step)
		var want, got diffReply
		var args []string
		if inline, ok := strings.CutPrefix(line, "> "); ok {
			raw := strings.ReplaceAll(inline, "{t}", tag)
			args = strings.Fields(raw)
			want, got = rc.send(t, raw+"\r\n"), cc.send(t, raw+"\r\n")
		} else {
			args = splitDiffLine(t, line)
			for i := range args {
				args[i] = strings.ReplaceAll(args[i], "{t}", tag)
			}
			want, got = rc.do(t, args), cc.do(t, args)
		}
		same := mode.same(want, got)
		why, known := knownDifferences[s.name+": "+line]
		switch {
		case !same && !known:
			t.Errorf("%s: %s\n\tredis-server: %s\n\tconcord:      %s", s.name, line, want, got)
		case same && known:
			t.Errorf("%s: %s answers as Redis does now (%s): drop it from knownDifferences (%s)", s.name, line, got, why)
		case !same:
			t.Logf("%s: %s: known difference (%s): redis-server %s, concord %s", s.name, line, why, want, got)
		}
		if len(args) > 0 && strings.EqualFold(args[0], "QUIT") || mode.last {
			return
		}
	}
}

// stepMode is how a step's two replies are compared, from the step's
// prefix: "~N " lets integers differ by up to N (times to live), "@ "
// ignores the order of the reply's elements (a map's pairs), since Redis
// answers KEYS or CONFIG GET in its hash table's order and Concord in byte
// order, and "^ " compares types and sizes only, for a reply that names
// the server's own version and connection id (HELLO).
type stepMode struct {
	tol       int64
	unordered bool
	shape     bool
	last      bool // the server closes the connection after it
}

// parseStepMode splits a step's prefix off.
func parseStepMode(t *testing.T, step string) (stepMode, string) {
	if rest, ok := strings.CutPrefix(step, "! "); ok {
		m, line := parseStepMode(t, rest)
		m.last = true
		return m, line
	}
	switch {
	case strings.HasPrefix(step, "@ "):
		return stepMode{unordered: true}, step[2:]
	case strings.HasPrefix(step, "^ "):
		return stepMode{shape: true}, step[2:]
	case !strings.HasPrefix(step, "~"):
		return stepMode{}, step
	}
	n, rest, _ := strings.Cut(step[1:], " ")
	tol, err := strconv.ParseInt(n, 10, 64)
	if err != nil {
		t.Fatalf("bad step %q", step)
	}
	return stepMode{tol: tol}, rest
}

func (m stepMode) same(a, b diffReply) bool {
	if m.unordered {
		a, b = sortedElems(a), sortedElems(b)
	}
	if m.shape {
		return sameShape(a, b)
	}
	return sameReply(a, b, m.tol)
}

// sortedElems returns r with its elements (a map's pairs) in sorted order.
func sortedElems(r diffReply) diffReply {
	width := 1
	if r.typ == '%' {
		width = 2
	}
	groups := make([][]diffReply, 0, len(r.elems)/width)
	for i := 0; i+width <= len(r.elems); i += width {
		groups = append(groups, r.elems[i:i+width])
	}
	key := func(g []diffReply) string { return diffReply{typ: '*', elems: g}.String() }
	slices.SortFunc(groups, func(x, y []diffReply) int { return strings.Compare(key(x), key(y)) })
	out := r
	out.elems = slices.Concat(groups...)
	return out
}

// sameShape compares types, nulls and sizes, not text.
func sameShape(a, b diffReply) bool {
	if a.typ != b.typ || a.null != b.null || len(a.elems) != len(b.elems) {
		return false
	}
	for i := range a.elems {
		if !sameShape(a.elems[i], b.elems[i]) {
			return false
		}
	}
	return true
}

// splitDiffLine splits a step into words; a word in double quotes is a Go
// string literal.
func splitDiffLine(t *testing.T, line string) []string {
	var out []string
	for line = strings.TrimLeft(line, " "); line != ""; line = strings.TrimLeft(line, " ") {
		if line[0] != '"' {
			w, rest, _ := strings.Cut(line, " ")
			out, line = append(out, w), rest
			continue
		}
		end := 1
		for end < len(line) && line[end] != '"' {
			if line[end] == '\\' {
				end++
			}
			end++
		}
		w, err := strconv.Unquote(line[:min(end+1, len(line))])
		if err != nil {
			t.Fatalf("step %q: %v", line, err)
		}
		out, line = append(out, w), line[min(end+1, len(line)):]
	}
	return out
}

// diffReply is one RESP reply as read: its type byte, its text (the line
// of a simple type, the bytes of a bulk), and its elements. A null bulk
// or array of RESP2 has null set and keeps its type.
type diffReply struct {
	typ   byte
	str   string
	null  bool
	elems []diffReply
}

func (r diffReply) String() string {
	switch {
	case r.null:
		return string(r.typ) + "nil"
	case r.typ == '*' || r.typ == '%' || r.typ == '~' || r.typ == '>':
		parts := make([]string, len(r.elems))
		for i, e := range r.elems {
			parts[i] = e.String()
		}
		return string(r.typ) + "[" + strings.Join(parts, " ") + "]"
	case r.typ == '$' || r.typ == '=':
		return string(r.typ) + strconv.Quote(r.str)
	}
	return string(r.typ) + r.str
}

// sameReply compares type and content; integers may differ by up to tol.
func sameReply(a, b diffReply, tol int64) bool {
	if a.typ != b.typ || a.null != b.null || len(a.elems) != len(b.elems) {
		return false
	}
	if a.typ == ':' && tol > 0 {
		x, err1 := strconv.ParseInt(a.str, 10, 64)
		y, err2 := strconv.ParseInt(b.str, 10, 64)
		if err1 != nil || err2 != nil || (x < 0) != (y < 0) || max(x-y, y-x) > tol {
			return false
		}
	} else if a.str != b.str {
		return false
	}
	for i := range a.elems {
		if !sameReply(a.elems[i], b.elems[i], tol) {
			return false
		}
	}
	return true
}

// diffConn is a raw RESP connection: commands go as multibulks, replies
// come back whole as trees.
type diffConn struct {
	addr string
	nc   net.Conn
	br   *bufio.Reader
}

func dialDiff(t *testing.T, addr string) *diffConn {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	return &diffConn{addr: addr, nc: nc, br: bufio.NewReader(nc)}
}

// dialDiffProto connects to addr and switches to RESP3 when proto is 3.
func dialDiffProto(t *testing.T, addr string, proto int) *diffConn {
	t.Helper()
	c := dialDiff(t, addr)
	if proto == 3 {
		if r := c.do(t, []string{"HELLO", "3"}); r.typ != '%' {
			c.close()
			t.Fatalf("HELLO 3 to %s: %s", c.addr, r)
		}
	}
	return c
}

func (c *diffConn) close() { c.nc.Close() }

func (c *diffConn) do(t *testing.T, args []string) diffReply {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	return c.send(t, b.String())
}

// send writes raw bytes (a command) and reads one reply.
func (c *diffConn) send(t *testing.T, raw string) diffReply {
	t.Helper()
	_ = c.nc.SetDeadline(time.Now().Add(15 * time.Second))
	if _, err := c.nc.Write([]byte(raw)); err != nil {
		t.Fatalf("%s: write %q: %v", c.addr, raw, err)
	}
	r, err := readDiffReply(c.br, 0)
	if err != nil {
		t.Fatalf("%s: reading the reply to %q: %v", c.addr, raw, err)
	}
	return r
}

// readDiffReply reads one reply of any RESP2 or RESP3 type.
func readDiffReply(br *bufio.Reader, depth int) (diffReply, error) {
	if depth > 16 {
		return diffReply{}, errors.New("reply nested too deep")
	}
	line, err := br.ReadString('\n')
	if err != nil {
		return diffReply{}, err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return diffReply{}, fmt.Errorf("malformed reply line %q", line)
	}
	r := diffReply{typ: line[0]}
	body := line[1 : len(line)-2]
	switch r.typ {
	case '+', '-', ':', ',', '#', '(', '_':
		r.str = body
		return r, nil
	case '$', '=', '!':
		n, err := strconv.Atoi(body)
		if err != nil || n > 64<<20 {
			return diffReply{}, fmt.Errorf("bad bulk length %q", body)
		}
		if n < 0 {
			r.null = true
			return r, nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(br, buf); err != nil {
			return diffReply{}, err
		}
		r.str = string(buf[:n])
		return r, nil
	case '*', '%', '~', '>', '|':
		n, err := strconv.Atoi(body)
		if err != nil || n > 1<<20 {
			return diffReply{}, fmt.Errorf("bad aggregate length %q", body)
		}
		if n < 0 {
			r.null = true
			return r, nil
		}
		if r.typ == '%' || r.typ == '|' {
			n *= 2
		}
		for range n {
			e, err := readDiffReply(br, depth+1)
			if err != nil {
				return diffReply{}, err
			}
			r.elems = append(r.elems, e)
		}
		return r, nil
	}
	return diffReply{}, fmt.Errorf("unknown reply type in %q", line)
}

// redisServerBinary finds redis-server on PATH, else under the module
// root's .cache/peers/bin (where make fetches peers), else skips.
func redisServerBinary(t *testing.T) string {
	if p, err := exec.LookPath("redis-server"); err == nil {
		return p
	}
	if root, err := testcluster.ModuleRoot(); err == nil {
		p := filepath.Join(root, ".cache", "peers", "bin", "redis-server")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Skip("redis-server is not installed (not on PATH nor in .cache/peers/bin); install Redis 7 to run this test")
	return ""
}

// startRedisServer starts redis-server on a free 127.0.0.1 port, without
// persistence, in a temporary directory, and kills it by PID when the test
// ends. A port taken between choosing it and binding it is retried.
func startRedisServer(t *testing.T, bin string) string {
	t.Helper()
	dir := t.TempDir()
	for attempt := 1; ; attempt++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		logPath := filepath.Join(dir, fmt.Sprintf("redis-%d.log", attempt))
		cmd := exec.Command(bin, "--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--save", "",
			"--appendonly", "no", "--dir", dir, "--logfile", logPath, "--daemonize", "no")
		if err := cmd.Start(); err != nil {
			t.Fatalf("starting %s: %v", bin, err)
		}
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		t.Cleanup(func() {
			_ = cmd.Process.Kill() // by PID
			<-exited
		})
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		if redisAnswers(addr, exited) {
			return addr
		}
		log, _ := os.ReadFile(logPath)
		if attempt == 5 || !strings.Contains(string(log), "Address already in use") {
			t.Fatalf("redis-server on port %d did not start:\n%s", port, log)
		}
	}
}

// redisAnswers polls addr until it answers PING (true), the process exits
// or 10 s pass (false).
func redisAnswers(addr string, exited <-chan struct{}) bool {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for {
		if nc, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			_ = nc.SetDeadline(time.Now().Add(time.Second))
			_, err = nc.Write([]byte("PING\r\n"))
			line, rerr := bufio.NewReader(nc).ReadString('\n')
			nc.Close()
			if err == nil && rerr == nil && line == "+PONG\r\n" {
				return true
			}
		}
		select {
		case <-exited:
			return false
		case <-deadline:
			return false
		case <-tick.C:
		}
	}
}
