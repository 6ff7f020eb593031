// Command concord runs a Concord node, a local cluster, or a client verb.
// See `concord --help` and the README.
package main

import (
	"os"

	"github.com/concord-kv/concord/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:]))
}
