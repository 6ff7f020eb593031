package scheduler

import (
	"time"

	"github.com/cockroachdb/pebble/v2"          // want: pebble-import
	"github.com/concord-kv/concord/internal/kv" // want: layering
	"github.com/concord-kv/concord/internal/placement"
)

var _ = pebble.Sync
var _ = kv.New
var _ = placement.New

func Plan() {
	time.Sleep(time.Millisecond) // want: core-clock
	go Plan()                    // want: core-goroutine
}
