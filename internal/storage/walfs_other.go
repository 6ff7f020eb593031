//go:build !linux

package storage

import "github.com/cockroachdb/pebble/v2/vfs"

// preallocateSized falls back to the file's own Preallocate where there is
// no fallocate (Pebble's is a no-op there): the WAL grows as it would
// without sizedWALFS.
func preallocateSized(f vfs.File, offset, length int64) error {
	return f.Preallocate(offset, length)
}
