package cli

import (
	"encoding/base64"
	"time"
	"unicode/utf8"

	"github.com/concord-kv/concord/client"
)

// Keys and values are bytes, but a JSON string carries only text: encoding/json
// writes each byte that is not valid UTF-8 as U+FFFD, so a script reading
// `-o json` could not get such a key or value back. Every JSON field that
// carries a user's key or value is therefore written by setBytes: the string
// field as before (exact whenever the bytes are valid UTF-8, so output for
// text is unchanged), and, only when the bytes are not valid UTF-8, a
// NAME_base64 field beside it holding the exact bytes in standard base64. A
// script reads NAME_base64 when it is present, NAME otherwise
// (docs/operations.md, "Binary keys and values").

// setBytes sets m[name] to b as text and, when that text would not be b,
// m[name+"_base64"] to b in standard base64.
func setBytes(m map[string]any, name string, b []byte) {
	m[name] = string(b)
	if !utf8.Valid(b) {
		m[name+"_base64"] = base64.StdEncoding.EncodeToString(b)
	}
}

// scanJSON is `scan -o json`'s list: one object per key, in scan order.
func scanJSON(kvs []client.KeyValue) []map[string]any {
	list := make([]map[string]any, 0, len(kvs))
	for _, kv := range kvs {
		m := make(map[string]any, 2)
		setBytes(m, "key", kv.Key)
		setBytes(m, "value", kv.Value)
		list = append(list, m)
	}
	return list
}

// getJSON is `get -o json`'s object; expire_at_unix_ms is 0 for a key
// without expiry.
func getJSON(key, v []byte, found bool, expireAt time.Time) map[string]any {
	j := map[string]any{"found": found, "expire_at_unix_ms": int64(0)}
	if !expireAt.IsZero() {
		j["expire_at_unix_ms"] = expireAt.UnixMilli()
	}
	setBytes(j, "key", key)
	setBytes(j, "value", v)
	return j
}

// casJSON is `cas -o json`'s object.
func casJSON(key []byte, res client.CASResult) map[string]any {
	j := map[string]any{"swapped": res.Swapped, "current_exists": res.CurrentExists}
	setBytes(j, "key", key)
	setBytes(j, "current_value", res.CurrentValue)
	return j
}

// delJSON is `del -o json`'s object.
func delJSON(key []byte, existed bool) map[string]any {
	j := map[string]any{"existed": existed}
	setBytes(j, "key", key)
	return j
}
