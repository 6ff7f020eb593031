// Package dial opens the gRPC client connections every part of Concord uses
// (client to node, node to node, raft transport), with one set of options.
package dial

import (
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
)

// MaxMsgBytes bounds one gRPC message: a batch of values at the default
// 1 MiB limit plus headroom. Servers use the same bound.
const MaxMsgBytes = 64 << 20

// Dial returns a lazily connecting client connection to addr.
//
// Reconnect backoff is capped at one second: gRPC's default grows to two
// minutes, which would keep a restarted node unreachable to its peers (and
// clients) long after it is back.
func Dial(addr string, extra ...grpc.DialOption) (*grpc.ClientConn, error) {
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMsgBytes), grpc.MaxCallSendMsgSize(MaxMsgBytes)),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff: backoff.Config{
				BaseDelay:  50 * time.Millisecond,
				Multiplier: 1.6,
				Jitter:     0.2,
				MaxDelay:   time.Second,
			},
			MinConnectTimeout: time.Second,
		}),
	}
	return grpc.NewClient(addr, append(opts, extra...)...)
}
