package transport

import (
	"github.com/concord-kv/concord/internal/dial"
	"github.com/concord-kv/concord/internal/storage"
	"google.golang.org/grpc"
)

var _ = dial.Options
var _ = storage.Open
var _ = grpc.Version

func New() {}
