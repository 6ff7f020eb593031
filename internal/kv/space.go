package kv

import "github.com/concord-kv/concord/api/concordpb"

// NoSpaceMark starts the message of a front door's refusal of a write
// while the cluster's space alarm is on (a node's data disk is under its
// --reserve-disk-bytes; internal/node/space.go). The refusal is a
// ResourceExhausted given before anything was proposed or forwarded, so a
// front end tells it by these words from gRPC's own ResourceExhausted (a
// reply over the message limit, which may come after a write applied):
// the Go client's copy is client.noSpaceMark, the Redis front end answers
// it -NOSPACE.
const NoSpaceMark = "no space: "

// AddsData reports whether a batch of ops may add data to the store, so
// that the space alarm refuses it whole. Only ops that can only read or
// remove pass: GET, DELETE, GET_DELETE, DELETE_EXPIRED (the expiry
// sweep's), CHECK (compares, changes nothing) and a CAS that deletes on a
// match. Everything else may store bytes: PUT, a storing CAS, the INCR
// family, APPEND, SET_RANGE, and EXPIRE (a key given an expiry gains an
// index entry; PERSIST keeps data longer), as does an op type this binary
// does not know.
func AddsData(ops []*concordpb.Op) bool {
	for _, op := range ops {
		switch op.GetType() {
		case concordpb.OpType_OP_GET, concordpb.OpType_OP_DELETE, concordpb.OpType_OP_GET_DELETE,
			concordpb.OpType_OP_DELETE_EXPIRED, concordpb.OpType_OP_CHECK:
		case concordpb.OpType_OP_CAS:
			if !op.GetDelete() {
				return true
			}
		default:
			return true
		}
	}
	return false
}
