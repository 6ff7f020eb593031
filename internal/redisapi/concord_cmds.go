package redisapi

import (
	"context"
	"strconv"
	"strings"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/resp"
)

// Concord's own commands, beyond CONCORD.CONSISTENCY: the ones the CS739
// library (kv739/) uses.

// cmdSession: CONCORD.SESSION id seq <command...> runs a write command
// with a client session: the shard applies session id's sequence seq at
// most once, and answers a retry with the first answer. Its keys must be
// in one shard (the session record lives there).
func cmdSession(c *conn, a [][]byte, w *resp.Writer) {
	sid, err1 := strconv.ParseUint(string(a[1]), 10, 64)
	seq, err2 := strconv.ParseUint(string(a[2]), 10, 64)
	if err1 != nil || err2 != nil || sid == 0 || seq == 0 {
		w.Error("ERR CONCORD.SESSION takes a session id and a sequence number, both positive integers")
		return
	}
	args := a[3:]
	cmd := lookup(args[0])
	switch {
	case cmd == nil:
		w.Error(unknownCommand(args))
		return
	case cmd.plan == nil || slicesContains(cmd.flags, "readonly"):
		w.Error("ERR CONCORD.SESSION runs a write command on keys, not '" + cmd.name + "'")
		return
	case !cmd.arityOK(len(args)):
		w.Error("ERR wrong number of arguments for '" + cmd.name + "' command")
		return
	}
	p, err := cmd.plan(c, args)
	if err != nil {
		w.Error(err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(c.s.ctx, c.s.cfg.CommandTimeout)
	defer cancel()
	groups, _, err := c.byShard(ctx, p.ops)
	if err == nil && len(groups) > 1 {
		err = errCrossSlot
	}
	if err != nil {
		w.Error(err.Error())
		return
	}
	h := c.txHeader()
	h.SessionId, h.Seq = sid, seq
	r, err := c.s.b.Batch(ctx, &concordpb.BatchRequest{Header: h, Ops: p.ops})
	if err == nil && len(r.GetResults()) != len(p.ops) {
		err = errWrongResults
	}
	if err != nil {
		w.Error(fromStatus(err, true).Error())
		return
	}
	p.answer(w, r.GetResults())
}

func slicesContains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// cmdMembers: CONCORD.MEMBERS: the nodes' addresses, each serving gRPC and
// RESP (not those of removed or replaced nodes: Backend.Members).
func cmdMembers(c *conn, _ [][]byte, w *resp.Writer) {
	m := c.s.b.Members()
	w.Array(len(m))
	for _, a := range m {
		w.BulkString(a)
	}
}

// cmdFault: CONCORD.FAULT DIE CLEAN|UNCLEAN | PARTITION [addr...] | HEAL |
// DISK-LOW ON|OFF, refused unless the node runs with
// --enable-fault-injection. DISK-LOW is Admin.DiskLow (concord fault
// disk-low): refused, and nothing set, on a node whose space guard is off.
func cmdFault(c *conn, a [][]byte, w *resp.Writer) {
	if !c.s.cfg.EnableFaultInjection {
		w.Error("ERR fault injection is disabled on this node (start it with --enable-fault-injection)")
		return
	}
	sub := strings.ToUpper(string(a[1]))
	switch {
	case sub == "DIE" && len(a) == 3 && (strings.EqualFold(string(a[2]), "clean") || strings.EqualFold(string(a[2]), "unclean")):
		// Die returns at once and the process ends a moment later (clean:
		// after handing off leaderships), so the answer usually gets out.
		c.s.b.Die(strings.EqualFold(string(a[2]), "clean"))
		w.SimpleString("OK")
	case sub == "PARTITION":
		reach := make([]string, 0, len(a)-2)
		for _, r := range a[2:] {
			reach = append(reach, string(r))
		}
		blocked := c.s.b.Partition(reach)
		w.Array(len(blocked))
		for _, id := range blocked {
			w.Int(int64(id))
		}
	case sub == "HEAL" && len(a) == 2:
		c.s.b.Heal()
		w.SimpleString("OK")
	case sub == "DISK-LOW" && len(a) == 3 && (strings.EqualFold(string(a[2]), "on") || strings.EqualFold(string(a[2]), "off")):
		if err := c.s.b.DiskLow(strings.EqualFold(string(a[2]), "on")); err != nil {
			w.Error("ERR " + err.Error())
			return
		}
		w.SimpleString("OK")
	default:
		w.Error("ERR CONCORD.FAULT takes DIE CLEAN|UNCLEAN, PARTITION [addr...], HEAL or DISK-LOW ON|OFF")
	}
}
