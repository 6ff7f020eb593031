package placement

import (
	"github.com/cockroachdb/pebble/v2"
	"github.com/concord-kv/concord/internal/placement/scheduler"
	"github.com/concord-kv/concord/internal/storage"
)

var _ = pebble.Sync
var _ = scheduler.Plan
var _ = storage.Open

func New() {}
