package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
)

// settingsCmd is a command with flags of the kinds the server has.
func settingsCmd(t *testing.T) (*cobra.Command, *struct {
	addr, peers string
	shards      int
	after       time.Duration
	flush       bool
}) {
	t.Helper()
	v := &struct {
		addr, peers string
		shards      int
		after       time.Duration
		flush       bool
	}{}
	cmd := &cobra.Command{Use: "server", RunE: func(*cobra.Command, []string) error { return nil }}
	f := cmd.Flags()
	f.StringVar(&v.addr, "addr", "127.0.0.1:7001", "")
	f.StringVar(&v.peers, "peers", "", "")
	f.IntVar(&v.shards, "shards", 16, "")
	f.DurationVar(&v.after, "suspect-after", 5*time.Second, "")
	f.BoolVar(&v.flush, "redis-enable-flush", false, "")
	return cmd, v
}

func writeConfig(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "concord.yaml")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// TestSettingsPrecedence: command line over environment over file over
// default, for every kind of flag; a list in the file becomes the
// comma-separated form.
func TestSettingsPrecedence(t *testing.T) {
	cmd, v := settingsCmd(t)
	path := writeConfig(t, "addr: 10.0.0.1:7001\npeers: [a:1, b:2]\nshards: 8\nsuspect-after: 9s\nredis-enable-flush: true\n")
	if err := cmd.Flags().Parse([]string{"--addr", "127.0.0.9:1"}); err != nil {
		t.Fatal(err)
	}
	if err := applySettings(cmd, path, env(map[string]string{"CONCORD_SHARDS": "32", "CONCORD_ADDR": "env:1"})); err != nil {
		t.Fatal(err)
	}
	if v.addr != "127.0.0.9:1" {
		t.Errorf("addr = %q: the command line must win", v.addr)
	}
	if v.shards != 32 {
		t.Errorf("shards = %d: the environment must win over the file", v.shards)
	}
	if v.peers != "a:1,b:2" || v.after != 9*time.Second || !v.flush {
		t.Errorf("from the file: peers %q, suspect-after %v, flush %v", v.peers, v.after, v.flush)
	}
}

func TestSettingsErrors(t *testing.T) {
	for name, tc := range map[string]struct {
		file string
		env  map[string]string
		want string
	}{
		"unknown key":    {file: "shard: 8\n", want: `unknown setting "shard"`},
		"bad value":      {file: "suspect-after: 5\n", want: "suspect-after"},
		"bad env value":  {env: map[string]string{"CONCORD_SHARDS": "many"}, want: "CONCORD_SHARDS"},
		"not a mapping":  {file: "- a\n- b\n", want: "config file"},
		"nested mapping": {file: "addr: {host: x}\n", want: "a mapping is not a value"},
	} {
		t.Run(name, func(t *testing.T) {
			cmd, v := settingsCmd(t)
			path := ""
			if tc.file != "" {
				path = writeConfig(t, tc.file)
			}
			err := applySettings(cmd, path, env(tc.env))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one mentioning %q", err, tc.want)
			}
			if v.shards != 16 && name != "bad env value" {
				t.Errorf("shards changed to %d by a refused config", v.shards)
			}
		})
	}
	if err := applySettings(&cobra.Command{}, filepath.Join(t.TempDir(), "missing.yaml"), env(nil)); err == nil || !strings.Contains(err.Error(), "--config") {
		t.Errorf("missing file: %v", err)
	}
}

// TestEveryCommandTakesConfig: the real command tree reads --config and
// the environment (here: `concord get` with its endpoints from a file).
func TestEveryCommandTakesConfig(t *testing.T) {
	root := NewRoot()
	for _, c := range root.Commands() {
		if (c.RunE != nil || c.Run != nil) && c.Flags().Lookup("config") == nil {
			t.Errorf("concord %s has no --config", c.Name())
		}
	}
	path := writeConfig(t, "endpoints: 127.0.0.1:1\ntimeout: 300ms\n")
	root.SetArgs([]string{"get", "k", "--config", path})
	err := root.Execute()
	if err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("get with endpoints from --config: %v, want an error naming 127.0.0.1:1", err)
	}
}

// TestSettingsTLSFlags: the TLS and token flags of the server and of the
// client verbs come from the environment and the file like every other.
func TestSettingsTLSFlags(t *testing.T) {
	path := writeConfig(t, "tls-ca: /certs/ca.crt\ntls-key: /certs/node.key\nauth-token-file: /etc/concord/token\n")
	for _, cmd := range []*cobra.Command{newServerCmd(), newGetCmd()} {
		if err := cmd.Flags().Parse(nil); err != nil {
			t.Fatal(err)
		}
		if err := applySettings(cmd, path, env(map[string]string{"CONCORD_TLS_CERT": "/env/node.crt"})); err != nil {
			t.Fatalf("%s: %v", cmd.Name(), err)
		}
		for flag, want := range map[string]string{"tls-ca": "/certs/ca.crt", "tls-key": "/certs/node.key",
			"tls-cert": "/env/node.crt", "auth-token-file": "/etc/concord/token"} {
			if got := cmd.Flags().Lookup(flag).Value.String(); got != want {
				t.Errorf("%s --%s = %q, want %q", cmd.Name(), flag, got, want)
			}
		}
	}
}
