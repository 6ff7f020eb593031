package e2e

import "github.com/concord-kv/concord/internal/testcluster"

var _ = testcluster.Start
