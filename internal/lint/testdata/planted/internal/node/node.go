package node

import (
	"net"

	"github.com/concord-kv/concord/client" // want: layering
	"github.com/concord-kv/concord/internal/kv"
	"github.com/concord-kv/concord/internal/multiraft"
	"github.com/concord-kv/concord/internal/storage"
	"github.com/concord-kv/concord/internal/testcluster" // want: layering
)

var _ = net.Listen
var _ = client.New
var _ = kv.New
var _ = multiraft.New
var _ = storage.Open
var _ = testcluster.Start

func Start() {}
