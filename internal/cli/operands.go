package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/concord-kv/concord/internal/grpcapi"
	"github.com/concord-kv/concord/internal/node"
)

// An operand is a key or value a client verb takes: an argument, or with
// its file flag the exact bytes of a file ("-": standard input). The files
// are how binary bytes get in: an argument cannot hold a NUL byte at all,
// and a shell script handles others badly.
type operand struct {
	name string // as the usage line names it: KEY, VALUE, OLD, NEW
	flag string // the flag naming its file
	kind string // key or value, for errors
	max  int    // the most bytes any cluster takes (see keyOperand)
	path string // the flag's value; "" takes the operand from the arguments
	omit bool   // this invocation takes no such operand (cas --absent: no OLD)
}

// keyOperand and valueOperand are the usual KEY and VALUE. The bounds are
// the most any node may be configured to take (node.MaxKeyBytesCap; a
// value must fit in a batch): checked before anything is sent, they keep a
// huge file or an endless stdin out of memory. A cluster's own, lower
// limits are its to check, and it refuses with their flag's name.
func keyOperand() *operand {
	return &operand{name: "KEY", flag: "key-file", kind: "key", max: node.MaxKeyBytesCap}
}

// valueOperand is a value named name (VALUE, OLD, NEW) read by --flag.
func valueOperand(name, flag string) *operand {
	return &operand{name: name, flag: flag, kind: "value", max: grpcapi.DefaultMaxBatchBytes}
}

// addOperandFlag adds op's file flag to cmd.
func addOperandFlag(cmd *cobra.Command, op *operand) {
	cmd.Flags().StringVar(&op.path, op.flag, "",
		fmt.Sprintf("read %s from this file, every byte of it (a trailing newline too; - for standard input), instead of an argument", op.name))
}

// readOperands returns the bytes of each operand in ops (nil for an omitted
// one): those without a file from args, in order, the others from their
// files. Nothing is read unless args are the ones ops leave to them.
func readOperands(verb string, args []string, ops []*operand, stdin io.Reader) ([][]byte, error) {
	var want, files []string
	stdinUsers := 0
	for _, op := range ops {
		switch {
		case op.omit && op.path != "":
			return nil, fmt.Errorf("--%s gives %s, which this %s takes none of", op.flag, op.name, verb)
		case op.omit:
		case op.path == "":
			want = append(want, op.name)
		default:
			files = append(files, "--"+op.flag)
			if op.path == "-" {
				stdinUsers++
			}
		}
	}
	if len(args) != len(want) {
		with := ""
		if len(files) > 0 {
			with = " with " + strings.Join(files, " and ")
		}
		return nil, fmt.Errorf("%s%s takes %s (got %s)", verb, with, argList(want), counted(len(args), "argument"))
	}
	if stdinUsers > 1 {
		return nil, errors.New("only one of the file flags can read standard input (-)")
	}
	out := make([][]byte, len(ops))
	for i, op := range ops {
		switch {
		case op.omit:
		case op.path == "":
			out[i], args = []byte(args[0]), args[1:]
		default:
			b, err := readOperandFile(op, stdin)
			if err != nil {
				return nil, err
			}
			out[i] = b
		}
	}
	return out, nil
}

// argCount is check (cobra's ExactArgs, MaximumNArgs, ...) worded as
// readOperands words a wrong count: "node remove takes ID (got 2
// arguments)", the arguments as the command's usage line names them,
// rather than cobra's "accepts 1 arg(s), received 2".
func argCount(check cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if check(cmd, args) == nil {
			return nil
		}
		var names []string
		for _, w := range strings.Fields(cmd.Use)[1:] {
			if strings.HasPrefix(w, "-") { // restore FILE --data-dir DIR: flags follow the arguments
				break
			}
			names = append(names, w)
		}
		verb := strings.TrimPrefix(cmd.CommandPath(), cmd.Root().Name()+" ")
		return fmt.Errorf("%s takes %s (got %s)", verb, argList(names), counted(len(args), "argument"))
	}
}

// counted is n with noun, plural unless n is 1: "1 node", "3 nodes".
func counted(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// argList names the arguments a verb wants, "no arguments" for none.
func argList(names []string) string {
	if len(names) == 0 {
		return "no arguments"
	}
	return strings.Join(names, " ")
}

// readOperandFile reads op's file, at most op.max bytes: one more is an
// error, before anything is sent.
func readOperandFile(op *operand, stdin io.Reader) ([]byte, error) {
	r := stdin
	if op.path != "-" {
		f, err := os.Open(op.path)
		if err != nil {
			return nil, fmt.Errorf("--%s: %w", op.flag, err)
		}
		defer f.Close()
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, int64(op.max)+1))
	if err != nil {
		return nil, fmt.Errorf("--%s %s: %w", op.flag, op.path, err)
	}
	if len(b) > op.max {
		return nil, fmt.Errorf("--%s %s: more than %d bytes, past the largest %s any cluster takes",
			op.flag, op.path, op.max, op.kind)
	}
	return b, nil
}
