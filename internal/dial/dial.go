// Package dial opens the gRPC client connections every part of Concord uses
// (client to node, node to node, raft transport), with one set of options.
package dial

import (
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
)

// MaxMsgBytes bounds one gRPC message: a batch of values at the default
// 1 MiB limit plus headroom. Servers use the same bound.
const MaxMsgBytes = 64 << 20

// Keepalive is how every connection checks that its peer is alive: after
// Time without traffic it pings, and closes the connection if no answer
// comes within Timeout, even with no call in flight. A peer that is paused
// or black-holed (SIGSTOP, a dropped route) thus costs at most Time+Timeout
// before the connection is seen as broken and redialled, instead of hanging
// until the kernel gives up on TCP. gRPC raises a Time below 10 s to 10 s.
var Keepalive = keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 3 * time.Second, PermitWithoutStream: true}

// KeepaliveEnforcement is the servers' side of Keepalive (every Concord
// gRPC server must use it, grpc.KeepaliveEnforcementPolicy): pings as often as
// Keepalive sends them, and without calls in flight, are allowed. (gRPC's
// default refuses pings more often than every 5 minutes and closes the
// connection of a client that sends them.)
var KeepaliveEnforcement = keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}

// ServerKeepalive is the rest of the servers' side (every Concord gRPC
// server must use it too, grpc.KeepaliveParams): a connection with no call
// in flight for MaxConnectionIdle gets an HTTP/2 GOAWAY and is closed, so
// that connections opened and left idle (a leaky client pool, a flood)
// do not hold the server's connection slots (--grpc-max-conns) for ever.
// Keepalive's pings do not count as calls: an idle client that pings is
// closed all the same. The close is graceful: a call that races it is
// retried by gRPC on a new connection, and a client's next call simply
// reconnects (Dial's connections, every Concord client's, see no error).
// Long-lived streams (raft's, KV.Stream) are calls in flight and keep
// their connection. Generous, as etcd's and most gRPC services': a client
// busy now and then keeps its connection. The servers' own pings
// (Time, Timeout) stay at gRPC's defaults (2 h, 20 s).
var ServerKeepalive = keepalive.ServerParameters{MaxConnectionIdle: 5 * time.Minute}

// Dial returns a lazily connecting client connection to addr: plaintext
// unless extra carries other transport credentials (Security.Options).
//
// Reconnect backoff is capped at one second: gRPC's default grows to two
// minutes, which would keep a restarted node unreachable to its peers (and
// clients) long after it is back.
//
// Service configs are off: a config published in DNS (TXT records, which
// grpc-go reads by default) could turn on gRPC's own retries, and a call
// gRPC retried after the node took it would break the client's reading of
// which attempts were sent (client.notSent): a write could apply twice.
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
		grpc.WithKeepaliveParams(Keepalive),
		grpc.WithDisableServiceConfig(),
	}
	return grpc.NewClient(addr, append(opts, extra...)...)
}
