//go:build unix

package node

import "golang.org/x/sys/unix"

// statfs returns the bytes an unprivileged process may still write on the
// filesystem holding dir (Bavail: root's reserved blocks left out, as
// Pebble runs unprivileged in most deployments) and its size.
func statfs(dir string) (free, total uint64, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, 0, err
	}
	return uint64(st.Bavail) * uint64(st.Bsize), uint64(st.Blocks) * uint64(st.Bsize), nil
}
