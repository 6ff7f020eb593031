package localcluster

import (
	"errors"
	"net"
	"sync"
)

// ports remembers every port FreePort handed out: the OS may offer a port
// again as soon as the probing listener closes, and two nodes of one
// process (or a node and a later cluster's node) must not both get it.
var ports struct {
	mu   sync.Mutex
	used map[int]bool
}

// FreePort returns a TCP port on 127.0.0.1 that the OS reported free,
// never the same one twice in one process.
func FreePort() (int, error) {
	ports.mu.Lock()
	defer ports.mu.Unlock()
	if ports.used == nil {
		ports.used = map[int]bool{}
	}
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !ports.used[port] {
			ports.used[port] = true
			return port, nil
		}
	}
	return 0, errors.New("localcluster: no free port found")
}

// FreePorts returns n ports from FreePort.
func FreePorts(n int) ([]int, error) {
	out := make([]int, 0, n)
	for range n {
		p, err := FreePort()
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}
