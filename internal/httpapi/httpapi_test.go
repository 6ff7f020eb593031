package httpapi

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/concord-kv/concord/api/concordpb"
)

type fakeBackend struct {
	ready     error
	status    *concordpb.StatusResponse
	statusErr error
	// staleStatus: the answer with ?stale=1 (nil: as without).
	staleStatus *concordpb.StatusResponse
}

func (f fakeBackend) Ready() error { return f.ready }
func (f fakeBackend) Status(_ context.Context, stale bool) (*concordpb.StatusResponse, error) {
	if stale && f.staleStatus != nil {
		return f.staleStatus, nil
	}
	return f.status, f.statusErr
}

func serve(h http.Handler, method, path, auth string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, nil)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

func TestRoutes(t *testing.T) {
	notReady := Handler(fakeBackend{ready: errors.New("shard 3 has no known leader"), statusErr: errors.New("no placement leader")}, Config{})
	if w := serve(notReady, "GET", "/readyz", ""); w.Code != 503 || !strings.Contains(w.Body.String(), "shard 3 has no known leader") {
		t.Errorf("/readyz not ready = %d %q, want 503 with the reason", w.Code, w.Body)
	}
	if w := serve(notReady, "GET", "/healthz", ""); w.Code != 200 {
		t.Errorf("/healthz = %d, want 200 even when not ready", w.Code)
	}
	if w := serve(notReady, "GET", "/api/status", ""); w.Code != 503 || !strings.Contains(w.Body.String(), "no placement leader") {
		t.Errorf("/api/status failing = %d %q", w.Code, w.Body)
	}
	// ?stale=1 asks for the node's own view, which answers where the
	// linearizable status cannot (the dashboard's fallback).
	staleOnly := Handler(fakeBackend{statusErr: errors.New("no placement leader"),
		staleStatus: &concordpb.StatusResponse{ClusterId: 7, AnsweredByNodeId: 3}}, Config{})
	if w := serve(staleOnly, "GET", "/api/status", ""); w.Code != 503 {
		t.Errorf("/api/status without quorum = %d %q, want 503", w.Code, w.Body)
	}
	if w := serve(staleOnly, "GET", "/api/status?stale=1", ""); w.Code != 200 || !strings.Contains(w.Body.String(), `"answeredByNodeId":"3"`) {
		t.Errorf("/api/status?stale=1 = %d %q, want the stale view", w.Code, w.Body)
	}
	if w := serve(notReady, "GET", "/metrics", ""); w.Code != 404 {
		t.Errorf("/metrics without a registry = %d, want 404", w.Code)
	}
	if w := serve(notReady, "GET", "/", ""); w.Code != 200 || !strings.Contains(w.Body.String(), `<script src="app.js">`) {
		t.Errorf("/ = %d, want the dashboard page", w.Code)
	}
	if w := serve(notReady, "GET", "/app.js", ""); w.Code != 200 || !strings.Contains(w.Body.String(), "api/status") {
		t.Errorf("/app.js = %d", w.Code)
	}
	if w := serve(notReady, "GET", "/nope", ""); w.Code != 404 {
		t.Errorf("/nope = %d, want 404", w.Code)
	}
	if w := serve(notReady, "POST", "/healthz", ""); w.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST /healthz = %d, want 405", w.Code)
	}

	ready := Handler(fakeBackend{status: &concordpb.StatusResponse{ClusterId: 7, AnsweredByNodeId: 2}},
		Config{AuthToken: "tok", Metrics: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("m 1\n")) })})
	if w := serve(ready, "GET", "/readyz", ""); w.Code != 200 {
		t.Errorf("/readyz = %d", w.Code)
	}
	if w := serve(ready, "GET", "/metrics", ""); w.Code != 200 || w.Body.String() != "m 1\n" {
		t.Errorf("/metrics = %d %q: must not need the token", w.Code, w.Body)
	}
	if w := serve(ready, "GET", "/api/status", "Bearer nope"); w.Code != 401 {
		t.Errorf("/api/status, wrong token = %d, want 401", w.Code)
	}
	if w := serve(ready, "GET", "/api/status", "bearer tok"); w.Code != 200 {
		t.Errorf("/api/status, scheme in lower case = %d, want 200 (RFC 7235: the scheme is case-insensitive)", w.Code)
	}
	w := serve(ready, "GET", "/api/status", "Bearer tok")
	if w.Code != 200 || w.Header().Get("Content-Type") != "application/json" || !strings.Contains(w.Body.String(), `"answeredByNodeId":"2"`) {
		t.Errorf("/api/status = %d %s %q", w.Code, w.Header().Get("Content-Type"), w.Body)
	}
}

// countingBackend counts the Status calls it answers.
type countingBackend struct {
	fakeBackend
	calls *atomic.Int64
}

func (c countingBackend) Status(ctx context.Context, stale bool) (*concordpb.StatusResponse, error) {
	c.calls.Add(1)
	return c.fakeBackend.Status(ctx, stale)
}

// TestStatusStaleParam, over a real listener: ?stale takes a boolean
// (1, true, 0, false); anything else is a 400 naming the value, and the
// node is not asked (before: ?stale=yes or ?stale=true was read as not
// stale, and the caller got the linearizable answer, or its 503 without a
// quorum, as if the parameter had been honoured).
func TestStatusStaleParam(t *testing.T) {
	var calls atomic.Int64
	b := countingBackend{fakeBackend{statusErr: errors.New("no placement leader"),
		staleStatus: &concordpb.StatusResponse{ClusterId: 7, AnsweredByNodeId: 3}}, &calls}
	srv := httptest.NewServer(Handler(b, Config{}))
	defer srv.Close()
	get := func(query string) (int, string) {
		t.Helper()
		resp, err := http.Get(srv.URL + "/api/status" + query)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	for _, q := range []string{"?stale=1", "?stale=true"} {
		if code, body := get(q); code != 200 || !strings.Contains(body, `"answeredByNodeId":"3"`) {
			t.Errorf("%s = %d %q, want the stale view", q, code, body)
		}
	}
	for _, q := range []string{"?stale=0", "?stale=false", ""} {
		if code, _ := get(q); code != 503 {
			t.Errorf("%q = %d, want the linearizable answer's 503", q, code)
		}
	}
	calls.Store(0)
	for _, q := range []string{"?stale=yes", "?stale=", "?stale=" + strings.Repeat("x", 1000)} {
		if code, body := get(q); code != 400 || !strings.Contains(body, "want 1 or 0") {
			t.Errorf("%.30s = %d %.100q, want 400 saying what stale takes", q, code, body)
		}
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("the node was asked for its status %d times on a bad request", n)
	}
}
