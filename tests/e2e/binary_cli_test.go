package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/concord-kv/concord/internal/testcluster"
)

// concordCLIStdin runs the real binary's client verb against c with stdin
// as its standard input and returns its standard output and exit status.
func concordCLIStdin(t *testing.T, c *testcluster.Cluster, stdin []byte, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	args = append(args, "--endpoints", strings.Join(c.Endpoints(), ","))
	cmd := exec.CommandContext(ctx, testcluster.Binary(t), args...)
	cmd.Stdin = bytes.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &exit):
		return string(out), exit.ExitCode()
	}
	t.Fatalf("concord %v: %v, stdout %q, stderr %q", args, err, out, stderr.String())
	return "", 0
}

// jsonBytes is the bytes a script reads from one object of `-o json` for
// field name: NAME_base64 decoded when present, NAME otherwise.
func jsonBytes(t *testing.T, obj map[string]any, name string) []byte {
	t.Helper()
	if b64, ok := obj[name+"_base64"].(string); ok {
		b, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			t.Fatalf("%s_base64 %q: %v", name, b64, err)
		}
		return b
	}
	s, _ := obj[name].(string)
	return []byte(s)
}

// TestBinaryKeysThroughCLI: a key and a value holding a NUL, 0xff and
// invalid UTF-8 go in through `concord put --key-file --value-file` and
// come back byte for byte from get, scan, put --prev, cas and del with
// -o json (their _base64 fields), and the Go client reads the same bytes.
// Before, the CLI could not put a NUL at all, and its JSON wrote each
// invalid byte as U+FFFD.
func TestBinaryKeysThroughCLI(t *testing.T) {
	t.Parallel()
	c := startCluster(t, testcluster.Options{Nodes: 1})
	key, val, val2 := []byte("bin\x00\xff\xc3(k"), []byte("\xff\x00v\xc3(\xfe\n"), []byte("\x00second\xff")
	dir := t.TempDir()
	keyFile, valFile, val2File := filepath.Join(dir, "key"), filepath.Join(dir, "value"), filepath.Join(dir, "value2")
	for path, b := range map[string][]byte{keyFile: key, valFile: val, val2File: val2} {
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	object := func(stdin []byte, wantCode int, args ...string) map[string]any {
		t.Helper()
		out, code := concordCLIStdin(t, c, stdin, append(args, "-o", "json")...)
		var obj map[string]any
		if err := json.Unmarshal([]byte(out), &obj); err != nil || code != wantCode {
			t.Fatalf("concord %v: exit %d, %q (%v)", args, code, out, err)
		}
		return obj
	}
	same := func(what string, got, want []byte) {
		t.Helper()
		if !bytes.Equal(got, want) {
			t.Fatalf("%s: %q, want %q", what, got, want)
		}
	}

	if obj := object(nil, 0, "put", "--key-file", keyFile, "--value-file", valFile); obj["ok"] != true {
		t.Fatalf("put: %v", obj)
	}
	got := object(nil, 0, "get", "--key-file", keyFile)
	same("get's key", jsonBytes(t, got, "key"), key)
	same("get's value", jsonBytes(t, got, "value"), val)

	out, code := concordCLIStdin(t, c, nil, "scan", "-o", "json")
	var list []map[string]any
	if err := json.Unmarshal([]byte(out), &list); err != nil || code != 0 || len(list) != 1 {
		t.Fatalf("scan: exit %d, %q (%v)", code, out, err)
	}
	same("scan's key", jsonBytes(t, list[0], "key"), key)
	same("scan's value", jsonBytes(t, list[0], "value"), val)

	// The value from standard input; --prev gives back the first one.
	prev := object(val2, 0, "put", "--key-file", keyFile, "--value-file", "-", "--prev")
	same("put --prev's prev_value", jsonBytes(t, prev, "prev_value"), val)
	v, found, err := c.Client(t).Get(context.Background(), key)
	if err != nil || !found {
		t.Fatalf("client Get: %v, %v", found, err)
	}
	same("the client's Get", v, val2)

	// A failed cas shows the current value; one with the right OLD swaps.
	failed := object(nil, 1, "cas", "--key-file", keyFile, "--old-file", valFile, "--value-file", valFile)
	same("failed cas's current_value", jsonBytes(t, failed, "current_value"), val2)
	if swapped := object(nil, 0, "cas", "--key-file", keyFile, "--old-file", val2File, "--value-file", valFile); swapped["swapped"] != true {
		t.Fatalf("cas: %v", swapped)
	}
	del := object(nil, 0, "del", "--key-file", keyFile)
	same("del's key", jsonBytes(t, del, "key"), key)
	if del["existed"] != true {
		t.Fatalf("del: %v", del)
	}
	if gone := object(nil, 1, "get", "--key-file", keyFile); gone["found"] != false {
		t.Fatalf("get after del: %v", gone)
	}
}
