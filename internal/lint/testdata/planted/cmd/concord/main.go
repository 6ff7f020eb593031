package main

import (
	"github.com/concord-kv/concord/internal/cli"
	"github.com/concord-kv/concord/internal/testcluster" // want: layering
)

var _ = cli.Root
var _ = testcluster.Start

func main() {}
