package node

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/concord-kv/concord/internal/dial"
)

// TestEveryGRPCMethodNeedsTheToken walks every method the node's gRPC
// server registers (KV, Cluster, Backup, RaftTransport, Admin, and any
// added later) and calls it without the token: each must answer
// Unauthenticated before its handler runs. A service registered outside
// the auth interceptors, or a stream handler that skipped them, fails
// here.
func TestEveryGRPCMethodNeedsTheToken(t *testing.T) {
	n := startSolo(t, func(c *Config) {
		c.AuthToken = "s3cret"
		c.EnableFaultInjection = true // Admin's calls too
	})
	conn, err := dial.Dial(n.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	calls := 0
	for svc, info := range n.srv.GetServiceInfo() {
		for _, m := range info.Methods {
			method := "/" + svc + "/" + m.Name
			if err := callEmpty(conn, method, m.IsClientStream || m.IsServerStream); status.Code(err) != codes.Unauthenticated {
				t.Errorf("%s without the token: %v, want Unauthenticated", method, err)
			}
			calls++
		}
	}
	if calls < 20 {
		t.Fatalf("only %d methods found: the walk missed services", calls)
	}
}

// callEmpty calls method with an empty request, as a unary call or as a
// stream that sends one message and reads the answer.
func callEmpty(conn *grpc.ClientConn, method string, stream bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if !stream {
		return conn.Invoke(ctx, method, &emptypb.Empty{}, &emptypb.Empty{})
	}
	s, err := conn.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, method)
	if err != nil {
		return err
	}
	_ = s.SendMsg(&emptypb.Empty{})
	_ = s.CloseSend()
	return s.RecvMsg(&emptypb.Empty{})
}

// rawCodec sends a request's bytes as they are (named "proto", the
// content subtype the node serves), so a test can send bytes that do not
// decode.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return v.([]byte), nil }
func (rawCodec) Unmarshal(_ []byte, _ any) error {
	return nil
}
func (rawCodec) Name() string { return "proto" }

// TestUnauthenticatedGRPCRefusedBeforeDecode: without the token a call is
// refused when its headers arrive, before the node reads or decodes its
// message: a request that does not decode is answered Unauthenticated,
// not with a decoding error. Before, gRPC read and decoded up to 64 MiB of
// each unauthenticated call (on any number of streams) before the
// interceptor refused it.
func TestUnauthenticatedGRPCRefusedBeforeDecode(t *testing.T) {
	n := startSolo(t, func(c *Config) { c.AuthToken = "s3cret" })
	conn, err := dial.Dial(n.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	garbage := []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}
	var out []byte
	for _, method := range []string{"/concord.v1.KV/Put", "/concord.v1.Cluster/Status"} {
		err := conn.Invoke(ctx, method, garbage, &out, grpc.ForceCodec(rawCodec{}))
		if status.Code(err) != codes.Unauthenticated {
			t.Errorf("%s: a request that does not decode, without the token: %v, want Unauthenticated", method, err)
		}
	}
}
