package cli

import (
	"bufio"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// startPprof serves pprof on an OS-assigned port with the given deadlines
// and returns its address.
func startPprof(t *testing.T, readHeader, idle time.Duration) string {
	t.Helper()
	srv, addr, err := servePprof("127.0.0.1:0", pprofTimeouts{readHeader: readHeader, idle: idle}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	return addr
}

// TestPprofIdleConnectionClosed protects --pprof-addr's deadlines: a
// keep-alive connection that sends nothing after its first request is
// closed by the server after the idle timeout, and one that never
// finishes its request headers after the header timeout (before: both
// were held until the client closed them, a goroutine and a socket each).
func TestPprofIdleConnectionClosed(t *testing.T) {
	addr := startPprof(t, 200*time.Millisecond, 200*time.Millisecond)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "GET /debug/pprof/ HTTP/1.1\r\nHost: node\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(c)
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/debug/pprof/ = %d", resp.StatusCode)
	}
	if _, err := r.ReadByte(); err != io.EOF {
		t.Fatalf("the idle connection was not closed by the server: read %v, want EOF", err)
	}

	stalled, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer stalled.Close()
	_ = stalled.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(stalled, "GET /debug/pprof/ HTTP/1.1\r\nHost: no"); err != nil {
		t.Fatal(err)
	}
	if b, err := io.ReadAll(stalled); err != nil {
		t.Fatalf("a request whose headers never end was not closed by the server: %v (read %q)", err, b)
	}
}

// TestPprofProfileOutlastsTheDeadlines: a CPU profile runs for its
// ?seconds, longer than the header and idle timeouts, and is answered:
// the server has no WriteTimeout, which pprof would refuse a profile at
// least as long as, and which would cut a 30 s profile.
func TestPprofProfileOutlastsTheDeadlines(t *testing.T) {
	addr := startPprof(t, 200*time.Millisecond, 200*time.Millisecond)
	start := time.Now()
	resp, err := http.Get("http://" + addr + "/debug/pprof/profile?seconds=1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || len(body) == 0 || strings.Contains(string(body), "WriteTimeout") {
		t.Fatalf("a 1 s profile = %d %.80q, want 200 and the profile", resp.StatusCode, body)
	}
	if d := time.Since(start); d < time.Second {
		t.Fatalf("the profile answered after %v, before its second", d)
	}
}

// TestPprofServerDeadlines: the server --pprof-addr starts with has header
// and idle deadlines, and no write deadline a CPU profile could outlast.
func TestPprofServerDeadlines(t *testing.T) {
	srv := newPprofServer(defaultPprofTimeouts)
	if srv.ReadHeaderTimeout <= 0 || srv.IdleTimeout <= 0 {
		t.Errorf("pprof server: ReadHeaderTimeout %v, IdleTimeout %v; want both set", srv.ReadHeaderTimeout, srv.IdleTimeout)
	}
	if srv.WriteTimeout != 0 || srv.ReadTimeout != 0 {
		t.Errorf("pprof server: WriteTimeout %v, ReadTimeout %v; want none (a profile takes its ?seconds)", srv.WriteTimeout, srv.ReadTimeout)
	}
}

// TestPprofLogsItsAddress: --pprof-addr with port 0 logs the port it
// chose (before: nothing said where pprof was served).
func TestPprofLogsItsAddress(t *testing.T) {
	var log strings.Builder
	srv, addr, err := servePprof("127.0.0.1:0", defaultPprofTimeouts, slog.New(slog.NewTextHandler(&log, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if !strings.Contains(log.String(), "addr="+addr) {
		t.Fatalf("log %q does not name the address pprof listens on, %s", log.String(), addr)
	}
}
