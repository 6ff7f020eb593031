package replica

import (
	crand "crypto/rand" // want: core-import
	"math/rand"
	"net/http" // want: core-import
	"os"       // want: core-import
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/concord-kv/concord/internal/kv"   // want: layering
	"github.com/concord-kv/concord/internal/node" // want: core-import,layering
	"github.com/concord-kv/concord/internal/storage"
	"google.golang.org/grpc" // want: core-import
	"google.golang.org/grpc/codes"
)

var _ = pebble.Sync
var _ = codes.OK
var _ = kv.New
var _ = node.Start
var _ = storage.Open

// tick is fine: time.Time and time.Duration are types, and now is an input.
func tick(now time.Time, d time.Duration) time.Time { return now.Add(d) }

func bad(r *rand.Rand) {
	go func() {}()                  // want: core-goroutine
	_ = time.Now()                  // want: core-clock
	t := time.NewTimer(time.Second) // want: core-clock
	_ = t
	since := time.Since // want: core-clock
	_ = since
	_ = rand.Intn(3) // want: core-rand
	_ = r.Intn(3)
	_ = rand.New(rand.NewSource(1))

	//lint:ignore core-clock this tests the escape hatch
	_ = time.Now()
	// lint:ignore core-goroutine pebble's spelling, with a space, works too
	go bad(r)
	//lint:ignore core-rand the wrong rule exempts nothing
	_ = time.Now() // want: core-clock
	/* want: bad-ignore */ //lint:ignore core-clock
	_ = time.Now()         // want: core-clock

	_, _ = crand.Read(nil)
	_ = os.Getpid()
	_ = http.StatusOK
	_ = grpc.Version
}

// shadow declares a variable called rand: rand.Intn below is its method.
func shadow() {
	rand := rand.New(rand.NewSource(1))
	_ = rand.Intn(3)
}
