// Package httpapi is the node's HTTP front door (--http-addr), beside the
// gRPC one: what monitoring systems and load balancers poll.
//
//	/healthz     200 while the process serves HTTP (liveness)
//	/readyz      200 once the node is a member whose replicas have a leader
//	             and have applied what they know to be committed; 503 and
//	             the reason before that (readiness)
//	/metrics     Prometheus text format (internal/metrics)
//	/api/status  the cluster's status as JSON, the same document as
//	             `concord status --output json` prints (protojson of
//	             concordpb.StatusResponse); ?stale=1 as --stale (400 for
//	             a value that is not a boolean)
//	/            the dashboard: static files embedded in the binary
//	             (dashboard/), which poll /api/status and /metrics
//
// When the node has an auth token, /api/status requires it as
// "Authorization: Bearer TOKEN"; the probes and /metrics stay open, as in
// etcd, because they reveal no keys or values.
package httpapi

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/frame"
)

//go:embed dashboard
var dashboardFiles embed.FS

// Backend is the node as the HTTP front door sees it.
type Backend interface {
	// Ready returns nil if the node is ready to serve, else why not.
	Ready() error
	// Status is the cluster's status, as the gRPC Cluster.Status answers:
	// linearizable, or with stale the node's own view (StatusRequest.stale).
	Status(ctx context.Context, stale bool) (*concordpb.StatusResponse, error)
}

// Config configures the handler.
type Config struct {
	// Metrics serves /metrics; nil: 404.
	Metrics http.Handler
	// AuthToken, if set, is required by the admin routes.
	AuthToken string
	// StatusTimeout bounds /api/status (default 5 s).
	StatusTimeout time.Duration
}

// Handler returns the HTTP front door of b.
func Handler(b Backend, cfg Config) http.Handler {
	if cfg.StatusTimeout == 0 {
		cfg.StatusTimeout = 5 * time.Second
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		text(w, http.StatusOK, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := b.Ready(); err != nil {
			text(w, http.StatusServiceUnavailable, "not ready: "+err.Error())
			return
		}
		text(w, http.StatusOK, "ready")
	})
	if cfg.Metrics != nil {
		mux.Handle("GET /metrics", cfg.Metrics)
	}
	mux.Handle("GET /api/status", authorized(cfg.AuthToken, statusHandler(b, cfg.StatusTimeout)))
	dash, err := fs.Sub(dashboardFiles, "dashboard")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	mux.Handle("GET /", http.FileServerFS(dash))
	return mux
}

func statusHandler(b Backend, timeout time.Duration) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), timeout)
		defer cancel()
		stale, err := staleParam(r.URL.Query())
		if err != nil {
			text(w, http.StatusBadRequest, err.Error())
			return
		}
		st, err := b.Status(ctx, stale)
		if err != nil {
			text(w, http.StatusServiceUnavailable, "status unavailable: "+err.Error())
			return
		}
		out, err := protojson.MarshalOptions{EmitUnpopulated: true}.Marshal(st)
		if err != nil {
			text(w, http.StatusInternalServerError, err.Error())
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write(out)
	}
}

// staleParam reads ?stale=1: the node's own view, for a cluster whose
// meta shard has no quorum (the dashboard falls back to it when the
// default, linearizable answer fails). Any other value than a boolean is
// refused: ?stale=true or ?stale=yes used to be read as "not stale", so
// the caller got the linearizable answer, or its 503 without a quorum,
// with no word that the parameter was ignored.
func staleParam(q url.Values) (bool, error) {
	v, ok := q["stale"]
	if !ok {
		return false, nil
	}
	stale, err := strconv.ParseBool(v[0])
	if err != nil {
		return false, fmt.Errorf("bad request: stale=%q: want 1 or 0 (or true or false)", v[0])
	}
	return stale, nil
}

// authorized requires "Authorization: Bearer token" when token is set (the
// scheme in any case: frame.BearerToken).
func authorized(token string, h http.Handler) http.Handler {
	if token == "" {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := frame.BearerToken(r.Header.Get("Authorization"))
		if !ok || !frame.TokenEqual([]byte(got), []byte(token)) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="concord"`)
			text(w, http.StatusUnauthorized, "unauthorized: this route needs the node's auth token as \"Authorization: Bearer TOKEN\"")
			return
		}
		h.ServeHTTP(w, r)
	})
}

func text(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(msg + "\n"))
}
