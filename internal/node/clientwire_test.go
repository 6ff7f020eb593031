package node

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/client"
	"github.com/concord-kv/concord/internal/certs"
	"github.com/concord-kv/concord/internal/frame"
)

func wireClient(t *testing.T, n *Node, wire, token string) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.NewWithOptions(ctx, client.Options{Endpoints: []string{n.Addr()}, Wire: wire, AuthToken: token})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// wireOps runs the same Put, Get and Batch through c, on keys of its own
// (prefix), and returns what they answered, prefix stripped.
func wireOps(t *testing.T, c *client.Client, prefix string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	k := func(s string) []byte { return []byte(prefix + s) }
	var out []string
	if _, _, err := c.Put(ctx, k("a"), []byte("1")); err != nil {
		t.Fatal(err)
	}
	prev, existed, err := c.Put(ctx, k("a"), []byte("2"), client.ReturnPrev())
	out = append(out, fmt.Sprintf("put prev=%q existed=%v err=%v", prev, existed, err))
	v, found, err := c.Get(ctx, k("a"))
	out = append(out, fmt.Sprintf("get %q %v %v", v, found, err))
	v, found, err = c.Get(ctx, k("missing"))
	out = append(out, fmt.Sprintf("get missing %q %v %v", v, found, err))
	res, err := c.Batch(ctx, []*concordpb.Op{
		{Type: concordpb.OpType_OP_PUT, Key: k("b"), Value: []byte("x")},
		{Type: concordpb.OpType_OP_GET, Key: k("a")},
		{Type: concordpb.OpType_OP_CAS, Key: k("b"), Expected: []byte("x"), Value: []byte("y")},
		{Type: concordpb.OpType_OP_GET, Key: k("b")},
	})
	out = append(out, fmt.Sprintf("batch err=%v", err))
	for _, r := range res {
		out = append(out, fmt.Sprintf("  ok=%v value=%q exists=%v", r.GetOk(), r.GetValue(), r.GetExists()))
	}
	// GETs alone: a read, sent without a session, served from one view.
	res, err = c.Batch(ctx, []*concordpb.Op{{Type: concordpb.OpType_OP_GET, Key: k("b")}, {Type: concordpb.OpType_OP_GET, Key: k("missing")}})
	if err != nil || len(res) != 2 || !res[0].GetOk() || string(res[0].GetValue()) != "y" || res[1].GetOk() {
		t.Fatalf("batch of GETs = %v, %v; want b=y and missing absent", res, err)
	}
	return out
}

// TestClientWireMatchesGRPC: Put, Get and Batch answer the same over the
// framed TCP wire as over gRPC, and the TCP client's calls really went over
// a framed connection.
func TestClientWireMatchesGRPC(t *testing.T) {
	n := startSolo(t)
	viaGRPC := wireOps(t, wireClient(t, n, client.WireGRPC, ""), "g/")
	if open := n.kvConns.Open(); open != 0 {
		t.Fatalf("%d framed connections after gRPC calls only", open)
	}
	viaTCP := wireOps(t, wireClient(t, n, client.WireTCP, ""), "t/")
	if fmt.Sprint(viaGRPC) != fmt.Sprint(viaTCP) {
		t.Fatalf("answers differ:\ngRPC %q\nTCP  %q", viaGRPC, viaTCP)
	}
	if open := n.kvConns.Open(); open != 1 {
		t.Fatalf("%d framed connections open after the TCP client's calls, want 1", open)
	}
	t.Logf("%q", viaTCP)
}

// TestClientDefaultWireIsTCP: a client given no wire sends its calls over
// the framed TCP wire, with the node's token, and is answered as over gRPC.
func TestClientDefaultWireIsTCP(t *testing.T) {
	const token = "s3cret"
	n := startSolo(t, func(c *Config) { c.AuthToken = token })
	viaGRPC := wireOps(t, wireClient(t, n, client.WireGRPC, token), "g/")
	viaDefault := wireOps(t, wireClient(t, n, "", token), "d/")
	if fmt.Sprint(viaGRPC) != fmt.Sprint(viaDefault) {
		t.Fatalf("answers differ:\ngRPC    %q\ndefault %q", viaGRPC, viaDefault)
	}
	if open := n.kvConns.Open(); open != 1 {
		t.Fatalf("%d framed connections open after the default client's calls, want 1", open)
	}
}

// rawWire opens a framed client connection to n and writes b after the
// hello with token.
func rawWire(t *testing.T, n *Node, token string, b []byte) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", n.Addr(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(15 * time.Second))
	hello, err := frame.AppendHello(nil, frame.KVMagic, token)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(append(hello, b...)); err != nil {
		t.Fatal(err)
	}
	return c
}

func putFrame(t *testing.T, key, value string) []byte {
	t.Helper()
	b, err := frame.Append(nil, &concordpb.StreamRequest{Calls: []*concordpb.StreamCall{{Id: 1,
		Request: &concordpb.StreamCall_Put{Put: &concordpb.PutRequest{Key: []byte(key), Value: []byte(value)}}}}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// awaitClosed reads c until the node closes it, failing on a deadline
// (the node kept it open); it returns what the node wrote.
func awaitClosed(t *testing.T, c net.Conn) []byte {
	t.Helper()
	got, err := io.ReadAll(c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("the node kept the connection open")
	}
	return got
}

// TestClientWireToken: with a token configured, a framed connection with
// the wrong one is answered Unauthenticated and closed, and its call does
// not run; the client with the right token is served over the wire.
func TestClientWireToken(t *testing.T) {
	const token = "s3cret"
	n := startSolo(t, func(c *Config) { c.AuthToken = token })
	c := rawWire(t, n, "wrong", putFrame(t, "k", "from the refused connection"))
	got := awaitClosed(t, c)
	fr := frame.NewReader(bytes.NewReader(got), 1<<20)
	resp := &concordpb.StreamResponse{}
	if err := fr.Next(resp); err != nil {
		t.Fatalf("refusal %q: %v", got, err)
	}
	if r := resp.GetReplies(); len(r) != 1 || r[0].GetId() != 0 || codes.Code(r[0].GetCode()) != codes.Unauthenticated {
		t.Fatalf("a wrong token got %v, want one reply, id 0, Unauthenticated", resp)
	}

	good := wireClient(t, n, client.WireTCP, token)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, found, err := good.Get(ctx, []byte("k")); err != nil || found {
		t.Fatalf("the refused connection's put: found=%v err=%v, want not found", found, err)
	}
	if n.kvConns.Open() != 1 {
		t.Fatalf("%d framed connections, want the good client's", n.kvConns.Open())
	}
}

// TestClientWireGarbage: a frame that is not a StreamRequest and a frame
// over the message limit each close the connection, run nothing, and leave
// the node serving.
func TestClientWireGarbage(t *testing.T) {
	n := startSolo(t)
	good := wireClient(t, n, client.WireTCP, "")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, _, err := good.Put(ctx, []byte("before"), []byte("v")); err != nil {
		t.Fatal(err)
	}

	body := make([]byte, 64)
	for i := range body {
		body[i] = 0xff
	}
	garbage := append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...)
	// A valid put after the garbage must not run: the connection ends first.
	awaitClosed(t, rawWire(t, n, "", append(garbage, putFrame(t, "after-garbage", "v")...)))
	oversize := binary.BigEndian.AppendUint32(nil, uint32(maxMsgBytes+1))
	awaitClosed(t, rawWire(t, n, "", append(oversize, putFrame(t, "after-oversize", "v")...)))
	awaitClosed(t, rawWire(t, n, "", []byte("not a frame at all, and short")))

	for _, k := range []string{"after-garbage", "after-oversize"} {
		if _, found, err := good.Get(ctx, []byte(k)); err != nil || found {
			t.Errorf("%s: found=%v err=%v, want not found (nothing of a bad connection runs)", k, found, err)
		}
	}
	if v, found, err := good.Get(ctx, []byte("before")); err != nil || !found || string(v) != "v" {
		t.Fatalf("after the garbage: %q %v %v", v, found, err)
	}
}

// TestClientWireTLS: on a TLS port with a token, the framed wire runs over
// TLS and passes with the token or, without it, with a client certificate
// the CA signed, as gRPC does.
func TestClientWireTLS(t *testing.T) {
	dir := t.TempDir()
	if _, err := certs.Generate(dir, certs.Options{}); err != nil {
		t.Fatal(err)
	}
	f := func(name string) string { return filepath.Join(dir, name) }
	n := startSolo(t, func(c *Config) {
		c.TLSCertFile, c.TLSKeyFile, c.TLSCAFile = f(certs.NodeFile), f(certs.NodeKey), f(certs.CAFile)
		c.AuthToken = "t"
	})
	for i, o := range []client.Options{
		{TLSCAFile: f(certs.CAFile), AuthToken: "t"},
		{TLSCAFile: f(certs.CAFile), TLSCertFile: f(certs.ClientFile), TLSKeyFile: f(certs.ClientKey)},
	} {
		o.Endpoints, o.Wire = []string{n.Addr()}, client.WireTCP
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		c, err := client.NewWithOptions(ctx, o)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		key := []byte(fmt.Sprintf("tls-%d", i))
		if _, _, err := c.Put(ctx, key, []byte("v")); err != nil {
			t.Errorf("client %d: put over the TLS framed wire: %v", i, err)
		}
		if v, found, err := c.Get(ctx, key); err != nil || !found || string(v) != "v" {
			t.Errorf("client %d: get %q %v %v", i, v, found, err)
		}
		if n.kvConns.Open() != 1 {
			t.Errorf("client %d: %d framed connections, want 1", i, n.kvConns.Open())
		}
		c.Close()
		cancel()
		awaitNoConns(t, n)
	}
}

// awaitNoConns polls until n serves no framed client connection.
func awaitNoConns(t *testing.T, n *Node) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for n.kvConns.Open() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d framed connections still open", n.kvConns.Open())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
