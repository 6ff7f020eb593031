package storage

import (
	"os"

	"github.com/cockroachdb/pebble/v2"
	"github.com/concord-kv/concord/internal/keys"
	"github.com/concord-kv/concord/internal/kv" // want: layering
)

var _ = os.Getpid
var _ = pebble.Sync
var _ = keys.Raft
var _ = kv.New

func Open() {}
