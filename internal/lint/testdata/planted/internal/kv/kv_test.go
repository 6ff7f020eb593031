package kv

// Test files are exempt from every rule.

import (
	"os"
	"testing"
	"time"

	"github.com/concord-kv/concord/internal/testcluster"
)

func TestX(t *testing.T) {
	go func() {}()
	_ = time.Now()
	_ = os.Getpid()
	_ = testcluster.Start
}
