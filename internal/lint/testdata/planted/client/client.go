package client

import (
	"github.com/cockroachdb/pebble/v2" // want: pebble-import
	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/dial"
	"github.com/concord-kv/concord/internal/routing"
	"github.com/concord-kv/concord/internal/storage" // want: layering
)

var _ = concordpb.File
var _ = dial.Options
var _ = routing.Table
var _ = storage.Open
var _ = pebble.Sync

func New() {}
