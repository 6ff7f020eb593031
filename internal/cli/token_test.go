package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadToken: a token file's surrounding white space (an editor's
// trailing newline) is not part of the token; an empty file, or a token
// the wires cannot carry (a second line, a space, more than 4,096 bytes,
// which every framed hello would refuse), fails with an error naming the
// file but never quoting the token.
func TestReadToken(t *testing.T) {
	dir := t.TempDir()
	long := strings.Repeat("x", 4097)
	for i, tc := range []struct {
		content, want, errHas string
	}{
		{content: "s3cret\n", want: "s3cret"},
		{content: "  s3cret\r\n\n", want: "s3cret"},
		{content: strings.Repeat("y", 4096), want: strings.Repeat("y", 4096)},
		{content: "\n \n", errHas: "is empty"},
		{content: "", errHas: "is empty"},
		{content: "first\nsecond\n", errHas: "visible ASCII"},
		{content: "two words", errHas: "visible ASCII"},
		{content: "caf\xc3\xa9", errHas: "visible ASCII"},
		{content: long, errHas: "at most 4096"},
	} {
		path := filepath.Join(dir, "token"+string(rune('a'+i)))
		if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := readToken(path)
		if tc.errHas == "" {
			if err != nil || got != tc.want {
				t.Errorf("%.20q: read %.20q, %v; want %.20q", tc.content, got, err, tc.want)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.errHas) || !strings.Contains(err.Error(), path) {
			t.Errorf("%.20q: read %.20q, %v; want an error naming %s and saying %q", tc.content, got, err, path, tc.errHas)
			continue
		}
		if trimmed := strings.TrimSpace(tc.content); trimmed != "" && strings.Contains(err.Error(), trimmed) {
			t.Errorf("%.20q: the error quotes the token: %v", tc.content, err)
		}
	}
	if _, err := readToken(filepath.Join(dir, "missing")); err == nil || !strings.Contains(err.Error(), "--auth-token-file") {
		t.Errorf("a missing file: %v, want an error naming the flag", err)
	}
}

// TestClientFlagsTrimToken: the client verbs read --auth-token-file as the
// server does (readToken): the token they hand the Go client is the file's
// content without its surrounding white space, which client.New would
// refuse; a file the server would refuse is refused here too, before
// anything is dialed.
func TestClientFlagsTrimToken(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	if err := os.WriteFile(good, []byte("  s3cret\r\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := securityFlags{tokenFile: good}.clientOptions()
	if err != nil || opts.AuthToken != "s3cret" {
		t.Errorf("clientOptions: token %q, %v; want s3cret", opts.AuthToken, err)
	}
	sec, err := securityFlags{tokenFile: good}.security()
	if err != nil || sec.Token != "s3cret" {
		t.Errorf("security (the dial options' token): %q, %v; want s3cret", sec.Token, err)
	}
	bad := filepath.Join(dir, "bad")
	if err := os.WriteFile(bad, []byte("s3cret\nsecond\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := (securityFlags{tokenFile: bad}).clientOptions(); err == nil || !strings.Contains(err.Error(), bad) || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("a two-line token file: %v, want an error naming the file without quoting it", err)
	}
}
