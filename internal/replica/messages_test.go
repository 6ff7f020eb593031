package replica

import (
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"
)

func app(to, term, index, commit uint64, entries int) *pb.Message {
	m := &pb.Message{Type: pb.MsgApp.Enum(), To: new(to), Term: new(term), Index: new(index), Commit: new(commit)}
	for range entries {
		m.Entries = append(m.Entries, &pb.Entry{})
	}
	return m
}

func TestSupersededAppend(t *testing.T) {
	hb := &pb.Message{Type: pb.MsgHeartbeat.Enum(), To: new(uint64(2)), Term: new(uint64(5)), Commit: new(uint64(9))}
	for _, tc := range []struct {
		name string
		msgs []*pb.Message
		want []bool // per message: dropped
	}{
		{"commit append then entries to the same peer", []*pb.Message{app(2, 5, 10, 9, 0), app(2, 5, 10, 9, 3)}, []bool{true, false}},
		{"two commit appends: the first goes", []*pb.Message{app(2, 5, 10, 8, 0), app(2, 5, 10, 9, 0)}, []bool{true, false}},
		{"a lone commit append stays", []*pb.Message{app(2, 5, 10, 9, 0)}, []bool{false}},
		{"another peer's append does not cover it", []*pb.Message{app(2, 5, 10, 9, 0), app(3, 5, 10, 9, 2)}, []bool{false, false}},
		{"a later append with a lower commit does not cover it", []*pb.Message{app(2, 5, 10, 9, 0), app(2, 5, 10, 8, 2)}, []bool{false, false}},
		{"a later append from a lower prev index does not cover it", []*pb.Message{app(2, 5, 10, 9, 0), app(2, 5, 7, 9, 2)}, []bool{false, false}},
		{"another term's append does not cover it", []*pb.Message{app(2, 5, 10, 9, 0), app(2, 6, 10, 9, 2)}, []bool{false, false}},
		{"a heartbeat does not cover it", []*pb.Message{app(2, 5, 10, 9, 0), hb}, []bool{false, false}},
		{"an append with entries is never dropped", []*pb.Message{app(2, 5, 10, 9, 1), app(2, 5, 11, 9, 1)}, []bool{false, false}},
	} {
		for i, want := range tc.want {
			if got := supersededAppend(tc.msgs, i); got != want {
				t.Errorf("%s: message %d dropped = %v, want %v", tc.name, i, got, want)
			}
		}
	}
}
