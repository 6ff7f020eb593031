package multiraft

// multiraft is not in the core: goroutines and the clock are its job.

import (
	"os"
	"time"

	"github.com/cockroachdb/pebble/v2" // want: pebble-import
	"github.com/concord-kv/concord/internal/kv"
	"github.com/concord-kv/concord/internal/replica"
	"github.com/concord-kv/concord/internal/transport" // want: layering
)

var _ = pebble.Sync
var _ = kv.New
var _ = replica.New
var _ = transport.New

func run() {
	go run()
	_ = time.Now()
	_ = os.Getpid()
}
