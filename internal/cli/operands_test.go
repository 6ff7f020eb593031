package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/concord-kv/concord/internal/grpcapi"
	"github.com/concord-kv/concord/internal/node"
)

// writeFile writes b to a new file in dir and returns its path.
func writeFile(t *testing.T, dir, name string, b []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestReadOperandsFromFiles: --key-file and --value-file give every byte
// of their file (a NUL, 0xff, a trailing newline), "-" reads standard
// input, and the arguments fill the operands that have no file, in order.
func TestReadOperandsFromFiles(t *testing.T) {
	dir := t.TempDir()
	keyPath := writeFile(t, dir, "k", binKey)
	valPath := writeFile(t, dir, "v", append(append([]byte{}, binValue...), '\n'))
	for _, tc := range []struct {
		name           string
		args           []string
		keyPath, value string
		stdin          []byte
		wantK, wantV   []byte
	}{
		{"arguments", []string{"k", "v"}, "", "", nil, []byte("k"), []byte("v")},
		{"both files", nil, keyPath, valPath, nil, binKey, append(append([]byte{}, binValue...), '\n')},
		{"value from stdin", []string{"k"}, "", "-", binValue, []byte("k"), binValue},
		{"key from stdin", []string{"v"}, "-", "", binKey, binKey, []byte("v")},
		{"empty stdin", []string{"k"}, "", "-", nil, []byte("k"), []byte{}},
	} {
		key, value := keyOperand(), valueOperand("VALUE", "value-file")
		key.path, value.path = tc.keyPath, tc.value
		got, err := readOperands("put", tc.args, []*operand{key, value}, bytes.NewReader(tc.stdin))
		if err != nil || !bytes.Equal(got[0], tc.wantK) || !bytes.Equal(got[1], tc.wantV) {
			t.Errorf("%s: %q, %v; want %q %q", tc.name, got, err, tc.wantK, tc.wantV)
		}
	}
}

// TestReadOperandsRefuses: the wrong number of arguments for the files
// given, two flags reading standard input, a file that cannot be read, and
// one past the largest key or value any cluster takes are errors that say
// which, before anything is read from standard input or sent.
func TestReadOperandsRefuses(t *testing.T) {
	dir := t.TempDir()
	small := writeFile(t, dir, "small", []byte("x"))
	bigKey := writeFile(t, dir, "bigkey", bytes.Repeat([]byte{0xff}, node.MaxKeyBytesCap+1))
	maxKey := writeFile(t, dir, "maxkey", bytes.Repeat([]byte{0xff}, node.MaxKeyBytesCap))
	bigValue := filepath.Join(dir, "bigvalue")
	writeFile(t, dir, "bigvalue", nil)
	if err := os.Truncate(bigValue, grpcapi.DefaultMaxBatchBytes+1); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name           string
		args           []string
		keyPath, value string
		errHas         string // "" for success
	}{
		{"extra argument", []string{"k", "v"}, "", small, "put with --value-file takes KEY (got 2 arguments)"},
		{"missing argument", nil, small, "", "put with --key-file takes VALUE (got 0 arguments)"},
		{"both files and an argument", []string{"k"}, small, small, "put with --key-file and --value-file takes no arguments (got 1 argument)"},
		{"no files, one argument", []string{"k"}, "", "", "put takes KEY VALUE (got 1 argument)"},
		{"stdin twice", nil, "-", "-", "only one of the file flags can read standard input"},
		{"missing file", []string{"k"}, "", filepath.Join(dir, "nope"), "--value-file: open " + filepath.Join(dir, "nope")},
		{"a directory", []string{"k"}, "", dir, "--value-file " + dir + ": read " + dir + ": is a directory"},
		{"key too large", []string{"v"}, bigKey, "", "--key-file " + bigKey + ": more than 65536 bytes, past the largest key any cluster takes"},
		{"key at the cap", []string{"v"}, maxKey, "", ""},
		{"value too large", []string{"k"}, "", bigValue, "--value-file " + bigValue + ": more than 8388608 bytes, past the largest value any cluster takes"},
	} {
		key, value := keyOperand(), valueOperand("VALUE", "value-file")
		key.path, value.path = tc.keyPath, tc.value
		stdin := strings.NewReader("stdin")
		_, err := readOperands("put", tc.args, []*operand{key, value}, stdin)
		switch {
		case tc.errHas == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.errHas != "" && (err == nil || !strings.Contains(err.Error(), tc.errHas)):
			t.Errorf("%s: %v; want an error saying %q", tc.name, err, tc.errHas)
		case tc.errHas != "" && stdin.Len() != len("stdin"):
			t.Errorf("%s: standard input was read before the error", tc.name)
		}
	}
}

// TestCasOperands: cas takes OLD and NEW from --old-file and --value-file;
// a file for the operand that --absent or --delete leaves out is refused.
func TestCasOperands(t *testing.T) {
	dir := t.TempDir()
	oldPath, newPath := writeFile(t, dir, "old", binValue), writeFile(t, dir, "new", binKey)
	ops := func(absent, del bool, oldFile, newFile string) (*operand, *operand, *operand) {
		old, value := valueOperand("OLD", "old-file"), valueOperand("NEW", "value-file")
		old.path, value.path, old.omit, value.omit = oldFile, newFile, absent, del
		return keyOperand(), old, value
	}
	k, old, value := ops(false, false, oldPath, newPath)
	key, cas, err := casArgs([]string{"k"}, k, old, value, nil)
	if err != nil || string(key) != "k" || !bytes.Equal(cas.Expected, binValue) || !bytes.Equal(cas.Value, binKey) || cas.ExpectAbsent || cas.Delete {
		t.Errorf("cas k --old-file --value-file: %q %+v, %v", key, cas, err)
	}
	k, old, value = ops(true, false, "", newPath)
	if key, cas, err = casArgs([]string{"k"}, k, old, value, nil); err != nil || !cas.ExpectAbsent || !bytes.Equal(cas.Value, binKey) {
		t.Errorf("cas k --value-file --absent: %q %+v, %v", key, cas, err)
	}
	k, old, value = ops(false, false, "", "")
	if _, _, err = casArgs([]string{"k", "old"}, k, old, value, nil); err == nil || err.Error() != "cas takes KEY OLD NEW (got 2 arguments)" {
		t.Errorf("cas k old: %v", err)
	}
	k, old, value = ops(true, false, oldPath, "")
	if _, _, err = casArgs([]string{"k", "v"}, k, old, value, nil); err == nil || !strings.Contains(err.Error(), "--old-file gives OLD, which --absent leaves out") {
		t.Errorf("cas --absent --old-file: %v", err)
	}
	k, old, value = ops(false, true, "", newPath)
	if _, _, err = casArgs([]string{"k", "v"}, k, old, value, nil); err == nil || !strings.Contains(err.Error(), "--value-file gives NEW, which --delete leaves out") {
		t.Errorf("cas --delete --value-file: %v", err)
	}
}

// TestPutValueFileTooLargeNotSent: a --value-file past the largest value
// any cluster takes fails with the size error, not a connection error: it
// is checked before the client dials (nothing listens at the endpoint).
func TestPutValueFileTooLargeNotSent(t *testing.T) {
	big := filepath.Join(t.TempDir(), "big")
	writeFile(t, filepath.Dir(big), "big", nil)
	if err := os.Truncate(big, grpcapi.DefaultMaxBatchBytes+1); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	rc := run([]string{"put", "k", "--value-file", big, "--endpoints", "127.0.0.1:1", "--timeout", "2s"}, &out, &errOut)
	want := "error: --value-file " + big + ": more than 8388608 bytes, past the largest value any cluster takes\n"
	if rc != 2 || errOut.String() != want {
		t.Errorf("put --value-file (8 MiB + 1): exit %d, stderr %q; want exit 2, %q", rc, errOut.String(), want)
	}
}
