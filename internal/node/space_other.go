//go:build !unix

package node

import "errors"

// statfs cannot measure a filesystem here: the space guard stays off.
func statfs(string) (free, total uint64, err error) {
	return 0, 0, errors.New("measuring free disk space is not supported on this platform")
}
