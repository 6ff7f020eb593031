package cli

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/concord-kv/concord/client"
)

// binKey and binValue hold a NUL, a 0xff and a broken UTF-8 sequence (0xc3
// begins a two-byte character that 0x28 does not continue): none of them
// survives a JSON string, which writes U+FFFD for each invalid byte.
var (
	binKey   = []byte("k\x00\xff\xc3(")
	binValue = []byte("\xff\x00v\xc3(\xfe")
)

// bytesOf is what a script reads back from one JSON object for a field:
// NAME_base64 decoded when it is there, NAME otherwise.
func bytesOf(t *testing.T, obj map[string]any, name string) []byte {
	t.Helper()
	if b64, ok := obj[name+"_base64"]; ok {
		b, err := base64.StdEncoding.DecodeString(b64.(string))
		if err != nil {
			t.Fatalf("%s_base64 %q: %v", name, b64, err)
		}
		return b
	}
	s, ok := obj[name].(string)
	if !ok {
		t.Fatalf("no %s in %v", name, obj)
	}
	return []byte(s)
}

// TestJSONCarriesBinaryBytes: every JSON output that carries a user's key
// or value (get, scan, put --prev, del, cas) gives a script its exact bytes
// back, binary ones through NAME_base64; printing them as strings alone
// turned 0xff into U+FFFD, so scan's keys could not be read back.
func TestJSONCarriesBinaryBytes(t *testing.T) {
	exp := time.UnixMilli(1764000010000)
	var put bytes.Buffer
	cmd := &cobra.Command{}
	cmd.SetOut(&put)
	if err := printPut(cmd, true, true, binValue, true); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		doc  any
		want map[string][]byte // field name -> bytes, in each object
	}{
		{"get", getJSON(binKey, binValue, true, exp), map[string][]byte{"key": binKey, "value": binValue}},
		{"scan", scanJSON([]client.KeyValue{{Key: binKey, Value: binValue}, {Key: binValue, Value: binKey}}), map[string][]byte{"key": binKey, "value": binValue}},
		{"put --prev", json.RawMessage(put.Bytes()), map[string][]byte{"prev_value": binValue}},
		{"del", delJSON(binKey, true), map[string][]byte{"key": binKey}},
		{"cas", casJSON(binKey, client.CASResult{CurrentExists: true, CurrentValue: binValue}), map[string][]byte{"key": binKey, "current_value": binValue}},
	} {
		var objs []map[string]any
		if tc.name == "scan" {
			roundTrip(t, tc.doc, &objs)
		} else {
			var obj map[string]any
			roundTrip(t, tc.doc, &obj)
			objs = []map[string]any{obj}
		}
		if tc.name == "scan" {
			if len(objs) != 2 {
				t.Fatalf("scan: %v", objs)
			}
			if k, v := bytesOf(t, objs[1], "key"), bytesOf(t, objs[1], "value"); !bytes.Equal(k, binValue) || !bytes.Equal(v, binKey) {
				t.Errorf("scan's second pair read back as %q=%q", k, v)
			}
		}
		for name, want := range tc.want {
			if got := bytesOf(t, objs[0], name); !bytes.Equal(got, want) {
				t.Errorf("%s -o json: %s reads back as %q, want %q (object %v)", tc.name, name, got, want, objs[0])
			}
			// The string field stays, as the lossy text, for scripts that read only it.
			if s, ok := objs[0][name].(string); !ok || s != string([]rune(string(want))) {
				t.Errorf("%s -o json: %s is %q, want the bytes' text", tc.name, name, objs[0][name])
			}
		}
	}
}

// TestJSONTextUnchanged pins the JSON of valid UTF-8 keys and values (a
// NUL and non-ASCII letters included, which JSON strings carry exactly):
// the objects are as before binary bytes got their _base64 field, with no
// such field, so scripts that read "key" and "value" go on working.
func TestJSONTextUnchanged(t *testing.T) {
	key, val := []byte("clé\x00"), []byte("naïve ✓")
	for _, tc := range []struct {
		name string
		doc  any
		want string
	}{
		{"get", getJSON(key, val, true, time.Time{}), `{"expire_at_unix_ms":0,"found":true,"key":"clé\u0000","value":"naïve ✓"}`},
		{"get absent", getJSON(key, nil, false, time.Time{}), `{"expire_at_unix_ms":0,"found":false,"key":"clé\u0000","value":""}`},
		{"scan", scanJSON([]client.KeyValue{{Key: key, Value: val}}), `[{"key":"clé\u0000","value":"naïve ✓"}]`},
		{"del", delJSON(key, false), `{"existed":false,"key":"clé\u0000"}`},
		{"cas", casJSON(key, client.CASResult{Swapped: true}), `{"current_exists":false,"current_value":"","key":"clé\u0000","swapped":true}`},
	} {
		var b bytes.Buffer
		if err := json.NewEncoder(&b).Encode(tc.doc); err != nil {
			t.Fatal(err)
		}
		if got := string(bytes.TrimSpace(b.Bytes())); got != tc.want {
			t.Errorf("%s -o json:\n got %s\nwant %s", tc.name, got, tc.want)
		}
	}
}
