package mystery // want: unknown-package

import "github.com/concord-kv/concord/internal/node"

var _ = node.Start
