// Package version numbers the ways of writing raft entries, so that a
// cluster whose nodes run different binaries (a rolling upgrade) never
// proposes an entry that one of its replicas would apply differently.
//
// Every binary knows the highest level it can apply, Binary. The cluster's
// version is a level every node of the cluster has reported it can apply;
// the placement leader raises it (a raft command of the meta shard, never
// lowered) once every node that is not removed has reported a higher
// level, and every node learns it from its heartbeat answers. A feature
// that changes what replicas apply is used only once the cluster's version
// reaches its level: before, some replica might not know it. A node whose
// binary is below the cluster's version stops rather than apply entries it
// does not understand, and such a binary cannot join.
//
// This is etcd's cluster version and CockroachDB's version gates, in small.
// Binaries from before levels existed report none and count as Base.
package version

// Level is a version of what replicas apply. Each level adds a way of
// writing entries that binaries of lower levels would apply differently
// (or not at all). Levels only grow; a feature keeps its level for ever.
import "fmt"

type Level uint32

const (
	// Unknown is no level: a node that has not learned the cluster's
	// version yet, or a report from a binary older than levels. Features
	// are gated as at Base.
	Unknown Level = 0
	// Base is everything up to and including hash tags and windowed
	// sessions: what every binary applies.
	Base Level = 1
	// IncrRepeat: an OP_INCR may stand for several INCRs of one key in a
	// row (Op.repeat), which the leader proposes for a run of pipelined
	// INCRs; a binary below it would apply one.
	IncrRepeat Level = 2
	// ExpiryOnStamps: a KV command may say that key expiry is measured at
	// the highest stamp the shard has seen (KVCommand.expiry_on_stamps)
	// rather than on its capped clock; a binary below it would measure on
	// the clock, and decide otherwise whether a key had expired.
	ExpiryOnStamps Level = 3
	// OrderedJoins: a raise of the cluster's version names the node
	// registrations it was decided on (SetClusterVersion.next_node_id),
	// and a join the joiner's level (AddNode.level); the meta shard
	// refuses a raise that a registration followed and a join below the
	// version, or without a level, so raises and joins keep their order
	// across a change of placement leader. A binary below it would apply
	// them regardless.
	OrderedJoins Level = 4
	// ResultBudget: a KV command may bound the bytes of stored values its
	// results return (KVCommand.max_result_bytes); an op past the bound
	// fails with OP_ERROR_RESULT_TOO_LARGE. A binary below it would apply
	// the op, answer otherwise and keep another session record.
	ResultBudget Level = 5
	// BoundedSessionExpiry: an ExpireSessions command may read at most
	// max_records session records from from_session_id on, and answer
	// where the next one resumes (CommandResult.next_session_id), so one
	// apply does bounded work. A binary below it would read every record
	// and expire another set.
	BoundedSessionExpiry Level = 6
	// IncrFloatText: an OP_INCR_FLOAT may carry its increment as text
	// (Op.float_delta_text), read at apply as Redis reads it, with the
	// stored number, and fail with OP_ERROR_NAN_OR_INFINITY. A binary below
	// it does not know the field and stops.
	IncrFloatText Level = 7
	// Versions: a KV command may say that its writes carry a version
	// (KVCommand.versioned: stored values in the versioned envelope, the
	// shard's version clock and delete buckets kept), and carry ops that
	// reconcile tentative writes of available mode (Op.tentative_version).
	// A binary below it could not read those values and stops on the field.
	Versions Level = 8

	// Binary is the highest level this binary applies.
	Binary = Versions
)

// Allows reports whether a cluster at version cluster may use a feature of
// level feature. Unknown allows only Base.
func (cluster Level) Allows(feature Level) bool {
	if cluster == Unknown {
		cluster = Base
	}
	return feature <= cluster
}

// JoinRefusal says why a join from a binary at level joiner is refused by
// a cluster at version cluster (joiner < cluster).
func JoinRefusal(cluster, joiner Level) string {
	return fmt.Sprintf("the cluster's version is %d and the joining node's binary applies only up to %d: run a newer binary on it; "+
		"it could not apply what the cluster proposes", cluster, joiner)
}
