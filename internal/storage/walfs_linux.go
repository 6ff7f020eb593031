package storage

import (
	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/sys/unix"
)

// preallocateSized is fallocate with mode 0: the blocks are reserved as with
// Pebble's FALLOC_FL_KEEP_SIZE, and the file's size moves to offset+length
// if that is larger, reading as zeros (sizedWALFS says why that is safe).
func preallocateSized(f vfs.File, offset, length int64) error {
	return unix.Fallocate(int(f.Fd()), 0, offset, length)
}
