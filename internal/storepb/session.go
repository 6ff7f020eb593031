package storepb

import "google.golang.org/protobuf/encoding/protowire"

// SessionLastActive returns the last_active_unix_nanos of the
// SessionRecord data encodes, as proto.Unmarshal would read it (the last
// occurrence wins; one of another wire type is an unknown field), without
// unmarshalling the rest. Session expiry reads every record of a shard
// for this one field, and the rest is results, up to the result budget
// each; unmarshalling them made a scan cost microseconds and allocations
// per record (BenchmarkExpireSessions). The fields it skips are checked
// only as far as their framing goes: a record whose result does not parse
// is not refused here, as proto.Unmarshal would refuse it.
func SessionLastActive(data []byte) (int64, error) {
	var active int64
	for len(data) > 0 {
		num, typ, n := protowire.ConsumeTag(data)
		if n < 0 {
			return 0, protowire.ParseError(n)
		}
		data = data[n:]
		if num == 3 && typ == protowire.VarintType {
			v, n := protowire.ConsumeVarint(data)
			if n < 0 {
				return 0, protowire.ParseError(n)
			}
			active, data = int64(v), data[n:]
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, data)
		if n < 0 {
			return 0, protowire.ParseError(n)
		}
		data = data[n:]
	}
	return active, nil
}
