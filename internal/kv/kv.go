package kv

import (
	"errors"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/keys"
	"github.com/concord-kv/concord/internal/mutant"
	"github.com/concord-kv/concord/internal/routing"
	"github.com/concord-kv/concord/internal/storage"
	"github.com/concord-kv/concord/internal/storepb"
)

// StateMachine applies KV commands for one shard. It is used by one
// goroutine at a time (the replica host's loop).
type StateMachine struct {
	shard uint64
	// sessions caches the last seq applied per session id, clock the shard
	// clock record: see cache.go. windows caches windowed sessions: see
	// window.go.
	sessions map[uint64]uint64
	windows  map[uint64]*window
	// windowBytes is the results the cached windows hold (window.counted,
	// summed), bounded by MaxCachedWindowBytes.
	windowBytes int
	clock       shardClock
	// deferred holds the session and clock records of the batch being
	// applied, written once by Flush: see deferred.go.
	deferred deferred
	// userPrefix starts the storage key of every user key of the shard;
	// op is the current op's key (value.go: unread).
	userPrefix []byte
	op         store
	// ver is the version the current command's writes take, verCap the
	// highest a tentative write of it may bring in (version.go).
	ver, verCap uint64
}

// New returns the state machine of shard.
func New(shard uint64) *StateMachine { return &StateMachine{shard: shard} }

// Apply applies cmd into b, an indexed batch (so reads see the writes of
// earlier commands in the same batch). desc is the shard's descriptor as of
// this entry; keys outside its hash range are refused. The session records
// and the clock are written by Flush, once per batch, which must follow
// the batch's last Apply.
func (sm *StateMachine) Apply(b *pebble.Batch, desc *concordpb.ShardDescriptor, cmd *storepb.Command) (*storepb.CommandResult, error) {
	if err := sm.begin(b); err != nil {
		return nil, err
	}
	switch k := cmd.GetKind().(type) {
	case *storepb.Command_Kv:
		if !routing.KnownScheme(desc.GetKeyHash()) {
			// Refusing the command would diverge from the replicas that
			// know the scheme and apply it: stop instead (the loop's fatal).
			return nil, fmt.Errorf("kv: shard %d hashes keys by scheme %d (key_hash), which this version does not know: run a newer binary", sm.shard, desc.GetKeyHash())
		}
		before, err := sm.loadClock(b)
		if err != nil {
			return nil, err
		}
		now, high, err := sm.advanceClock(b, cmd.GetUnixNanos())
		if err != nil {
			return nil, err
		}
		expiryNow := now
		if k.Kv.GetExpiryOnStamps() {
			expiryNow = high
		}
		sm.beginVersion(k.Kv.GetVersioned(), before.high, high, k.Kv.GetOps())
		return sm.applyKV(b, desc, now, expiryNow, k.Kv)
	case *storepb.Command_ExpireSessions:
		now, _, err := sm.advanceClock(b, cmd.GetUnixNanos())
		if err != nil {
			return nil, err
		}
		if cmd.GetUnixNanos() == 0 {
			return &storepb.CommandResult{}, nil // no stamp, no idle time to measure
		}
		// The proposer computed the cutoff from its own clock: the difference
		// is the idle time (TTL) it means, which is right even when its
		// clock is not. The cutoff itself is taken on the shard's clock.
		es := k.ExpireSessions
		idle := cmd.GetUnixNanos() - es.GetIdleBeforeUnixNanos()
		next, err := sm.expireSessions(b, now-idle, es.GetFromSessionId(), es.GetMaxRecords())
		return &storepb.CommandResult{NextSessionId: next}, err
	default:
		return errResult(codes.InvalidArgument, "command %T is not a KV command", k), nil
	}
}

// applyKV applies c at now on the shard's clock (sessions' activity) and
// expiryNow, the time key expiry is measured at (Apply).
func (sm *StateMachine) applyKV(b *pebble.Batch, desc *concordpb.ShardDescriptor, now, expiryNow int64, c *storepb.KVCommand) (*storepb.CommandResult, error) {
	e := env{nowMs: expiryNow / int64(time.Millisecond), maxValue: c.GetMaxValueBytes(), maxResult: c.GetMaxResultBytes()}
	if err := sm.checkTentative(c.GetOps()); err != nil {
		return errResult(codes.InvalidArgument, "%v", err), nil
	}
	if c.GetSessionId() != 0 && c.GetSessionFloor() != 0 {
		return sm.applyWindowed(b, desc, e, now, c)
	}
	if id := c.GetSessionId(); id != 0 {
		last, found, err := sm.sessionSeq(b, id)
		if errors.Is(err, errSessionMode) {
			return errResult(codes.FailedPrecondition, "session %x is windowed: a request of it must carry its floor", id), nil
		}
		if err != nil {
			return nil, err
		}
		switch {
		case found && c.GetSeq() == last && !(mutant.Enabled && mutant.On(mutant.NoSessionDedup)):
			return sm.retryResult(b, id) // a retry: answer as the first time
		case found && c.GetSeq() < last:
			return errResult(codes.FailedPrecondition,
				"session %x: sequence %d is older than %d, already applied", id, c.GetSeq(), last), nil
		}
	}
	res, err := sm.applyOps(b, desc, e, c.GetOps())
	if err != nil {
		return nil, err
	}
	if c.GetSessionId() != 0 {
		sm.deferSession(c.GetSessionId(), session{seq: c.GetSeq(), result: res, active: now})
		sm.cacheSession(c.GetSessionId(), c.GetSeq())
	}
	return res, nil
}

// readSession reads session's record from b.
func (sm *StateMachine) readSession(b pebble.Reader, session uint64) (*storepb.SessionRecord, bool, error) {
	rec := &storepb.SessionRecord{}
	found, err := storage.GetProto(b, keys.Session(sm.shard, session), rec)
	return rec, found, err
}

// retryResult is the stored result of session's last command, which a
// retry of it gets: read from Pebble, as retries are rare and results may
// be large (the cache holds only sequence numbers), unless that command is
// in the current batch. Either way a copy: the first answer is someone
// else's.
func (sm *StateMachine) retryResult(b pebble.Reader, session uint64) (*storepb.CommandResult, error) {
	if s, ok := sm.deferred.sessions[session]; ok {
		return proto.CloneOf(s.result), nil
	}
	rec, found, err := sm.readSession(b, session)
	if err == nil && !found {
		err = fmt.Errorf("kv: shard %d: session %x is cached but has no record", sm.shard, session)
	}
	return rec.GetResult(), err
}

// applyOps applies ops all or nothing: every op is checked before any is
// applied. (An op that fails with an OpError changes nothing, but the
// others still apply: that is the op's result, not a malformed command.)
// A CHECK that does not match skips the next op.Skip ops.
func (sm *StateMachine) applyOps(b *pebble.Batch, desc *concordpb.ShardDescriptor, e env, ops []*concordpb.Op) (*storepb.CommandResult, error) {
	if res := sm.checkOps(desc, e, ops); res != nil {
		return res, nil
	}
	one := &oneOpResult{}
	res := &one.res
	switch {
	case len(ops) == 1:
		res.Results = one.results[:0]
	case len(ops) > 1:
		res.Results = make([]*concordpb.OpResult, 0, len(ops))
	}
	skip := 0 // ops still to skip
	for _, op := range ops {
		if skip > 0 {
			skip--
			res.Results = append(res.Results, &concordpb.OpResult{Skipped: true})
			continue
		}
		// Every blind PUT's result is the same empty one, and nothing
		// changes a result once applied: the command's blind PUTs share
		// one (a merged batch of pipelined SETs is hundreds of them).
		r, err := sm.applyOp(b, &e, op, &one.op)
		if err != nil {
			return nil, err
		}
		if op.GetType() == concordpb.OpType_OP_CHECK && !r.GetOk() {
			skip = int(op.GetSkip())
		}
		res.Results = append(res.Results, r)
	}
	return res, nil
}

// oneOpResult is a command's result with room for one op's: a one-op
// command (every Put) allocates its result once, not three times, on
// every replica.
type oneOpResult struct {
	res     storepb.CommandResult
	results [1]*concordpb.OpResult
	op      concordpb.OpResult // the blind PUTs' (empty) result, shared
}

// checkOps refuses a command with an op outside the shard's hash range or
// malformed (CheckOp, CheckSkips, or a TTL that does not fit on the
// shard's clock).
func (sm *StateMachine) checkOps(desc *concordpb.ShardDescriptor, e env, ops []*concordpb.Op) *storepb.CommandResult {
	for i, op := range ops {
		if h := routing.HashFor(desc.GetKeyHash(), op.GetKey()); h < desc.GetStartHash() || h > desc.GetEndHash() {
			return errResult(codes.InvalidArgument, "key %q does not belong to shard %d", op.GetKey(), sm.shard)
		}
		err := CheckOp(op)
		if err == nil {
			_, err = e.expiry(op)
		}
		if err != nil {
			return errResult(codes.InvalidArgument, "operation %d: %v", i, err)
		}
	}
	if err := CheckSkips(ops); err != nil {
		return errResult(codes.InvalidArgument, "%v", err)
	}
	return nil
}

// MaxClockStep bounds how far one command can move a shard's clock.
//
// A shard's clock is the time session activity is measured in (and key
// expiry, for a command without expiry_on_stamps: Apply).
// It starts at the first stamped command's stamp; after that, a command
// stamped later than every earlier one moves it forward by the difference,
// at most MaxClockStep; a command stamped earlier leaves it. So it advances
// at the rate of the proposers' clocks, and a leader whose clock is ahead
// moves it by at most MaxClockStep more than real time (once: after that,
// the highest stamp is its own, and it counts only its own elapsed time);
// a leader whose clock is behind stops it until its clock passes the highest
// stamp (sessions then live longer, never shorter). Every user shard's leader
// proposes ExpireSessions at least once a minute (node/sessions.go), so an
// idle shard's consecutive stamps are about a minute apart: the step bound
// is set just above that.
const MaxClockStep = int64(90 * time.Second)

// advanceClock moves the shard's clock for a command stamped stamp (0: not
// stamped, the clock stays) and returns the clock's new value and the
// highest stamp applied (the time key expiry is measured at, for a command
// that says so: KVCommand.expiry_on_stamps). The clock is kept in the
// shard's state span (in the applied-state record, through Flush), so
// snapshots carry it.
func (sm *StateMachine) advanceClock(b *pebble.Batch, stamp int64) (now, high int64, err error) {
	c, err := sm.loadClock(b)
	if err != nil {
		return 0, 0, err
	}
	switch {
	case stamp == 0 || (c.found && stamp <= c.high):
		return c.now, c.high, nil
	case !c.found:
		c.now = stamp
	default:
		c.now += min(stamp-c.high, MaxClockStep)
	}
	c.high, c.found = stamp, true
	sm.clock = c // handed to the replica by Flush
	return c.now, c.high, nil
}

// MaxSessionsPerExpiry is the most session records an ExpireSessions
// command of a leader reads (ExpireSessions.max_records, once the cluster's
// version allows it): a few milliseconds of apply at 0.2-0.4 µs a record
// (BenchmarkExpireSessions), so expiry never holds the host's apply loop,
// which every shard of the host shares, for long; the leader proposes
// again from where one stopped (node/sessions.go). With one new session per
// request records pile up to rate x TTL (36M at 10k/s and 1 h), and one
// unbounded scan of them took minutes.
const MaxSessionsPerExpiry = 10_000

// expireSessions deletes the records of sessions idle since before t, a time
// on the shard's clock, reading at most limit records (0: all) from
// session id from on. next is the first session id it did not read, where the next
// command resumes; 0 once it read to the end. It reads the records
// themselves, so the batch's deferred ones are written first.
func (sm *StateMachine) expireSessions(b *pebble.Batch, t int64, from uint64, limit uint32) (next uint64, err error) {
	if err := sm.flushSessions(); err != nil {
		return 0, err
	}
	if err := sm.flushWindows(); err != nil {
		return 0, err
	}
	lo, hi := keys.SessionSpan(sm.shard)
	if from != 0 {
		lo = keys.Session(sm.shard, from)
	}
	it, err := b.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return 0, err
	}
	stale, next, err := sm.staleSessions(it, t, limit)
	if cerr := it.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, err
	}
	for _, id := range stale {
		if err := b.Delete(sm.deferred.sessionKey(sm.shard, id), nil); err != nil {
			return 0, err
		}
		delete(sm.sessions, id)
		if w, ok := sm.windows[id]; ok {
			sm.dropWindow(id, w)
		}
	}
	return next, nil
}

// staleSessions reads at most limit (0: all) session records from it and
// returns the ids of those last active before t, and the id of the first
// record it did not read (0: none left). Only the activity time of each is
// decoded: the results the records keep (up to the result budget each) are
// skipped, not unmarshalled.
func (sm *StateMachine) staleSessions(it *pebble.Iterator, t int64, limit uint32) (stale []uint64, next uint64, err error) {
	read := uint32(0)
	for ok := it.First(); ok; ok = it.Next() {
		if limit != 0 && read == limit {
			return stale, keys.SessionOf(sm.shard, it.Key()), nil
		}
		read++
		v, err := it.ValueAndErr()
		if err != nil {
			return nil, 0, err
		}
		active, err := storepb.SessionLastActive(v)
		if err != nil {
			return nil, 0, fmt.Errorf("kv: shard %d: session record %x: %w", sm.shard, it.Key(), err)
		}
		if active < t {
			stale = append(stale, keys.SessionOf(sm.shard, it.Key()))
		}
	}
	return stale, 0, it.Error()
}

func get(r pebble.Reader, k []byte) ([]byte, bool, error) {
	v, closer, err := r.Get(k)
	if err == pebble.ErrNotFound {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	defer closer.Close()
	return append([]byte(nil), v...), true, nil
}

func errResult(c codes.Code, format string, args ...any) *storepb.CommandResult {
	return &storepb.CommandResult{ErrorCode: uint32(c), ErrorMessage: fmt.Sprintf(format, args...)}
}
