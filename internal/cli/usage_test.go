package cli

import (
	"bytes"
	"strings"
	"testing"
)

// runCLI executes the command line in-process and returns its error and what
// it printed on standard output.
func runCLI(args ...string) (string, error) {
	root := NewRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	_, err := root.ExecuteC()
	return out.String(), err
}

// TestUnknownSubcommandFails: a word that is none of a group's subcommands
// is an error with exit status 2, as on the root (before: the group printed
// its help and exited 0, so `concord node join x` read as a success); the
// group alone still prints its help.
func TestUnknownSubcommandFails(t *testing.T) {
	for _, args := range [][]string{
		{"node", "join", "x"}, {"shard", "lsit"}, {"cluster", "down"}, {"leader", "move"}, {"fault", "crash", "a:1"},
	} {
		_, err := runCLI(args...)
		want := `unknown command "` + args[1] + `" for "concord ` + args[0] + `"`
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("concord %s: err = %v, want %q", strings.Join(args, " "), err, want)
		}
		if code := Main(args); code != 2 {
			t.Errorf("concord %s exited %d, want 2", strings.Join(args, " "), code)
		}
	}
	out, err := runCLI("node")
	if err != nil || !strings.Contains(out, "Available Commands") {
		t.Errorf("concord node: err = %v, output %q; want its help", err, out)
	}
}
