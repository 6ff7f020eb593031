package kv

import (
	"github.com/cockroachdb/pebble/v2"
	"github.com/concord-kv/concord/internal/placement" // want: layering
	"github.com/concord-kv/concord/internal/storage"
	"google.golang.org/grpc/codes"
)

var _ = pebble.Sync
var _ = placement.New
var _ = storage.Open
var _ = codes.OK

func New() {}
