// Package envoyhost serves an Envoy bootstrap with the project's wazero host: every listener
// of the file (as read by package envoyconf) on its address, each request routed the way
// Envoy routes it and run through the listener's Wasm filter on wazero (package wasmhost),
// then forwarded to the route's cluster; plus an admin listener with /stats/prometheus and
// /ready. A Server stands for one Envoy process: its filters share one shared-data store and
// one stats store, and two Servers are two independent proxies.
//
// What Envoy does that a Server does not: TLS, HTTP/2 and HTTP/3 downstream, load balancing
// and health checking (a cluster is its first endpoint), retries, access log formats other
// than text formats given inline (command operators: see accesslog.go) and access log
// filters, xff_num_trusted_hops (the filter keys on source.address, which is the peer here),
// FAIL_OPEN and FAIL_RELOAD (see Notes), and the periodic stats flush (histograms are always
// current). Under use_remote_address the peer is appended to X-Forwarded-For, as Envoy does.
package envoyhost

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ratelimit-wasm/ratelimit/wasmhost"
	"github.com/ratelimit-wasm/ratelimit/wasmhost/envoyconf"
)

// Options adjusts how a Server runs a configuration.
type Options struct {
	// Wasm is the filter module for every Wasm filter. Nil reads each filter's
	// vm_config.code.local.filename (or uses its inline code).
	Wasm []byte
	// Workers is the number of worker VMs per filter (Envoy's --concurrency). Default 2.
	Workers int
	// Bind, when set, replaces the host part of every listener address and of the admin
	// address, for example "127.0.0.1" to keep a local run off the network.
	Bind string
	// EphemeralPorts listens on a free port instead of each configured one (tests); the
	// chosen addresses are reported by URL and AdminURL.
	EphemeralPorts bool
	// SharedData is the process's shared-data store. Nil gives the Server a store of its
	// own, so that two Servers model two proxies.
	SharedData *wasmhost.SharedData
	// LogLevel and LogWriter are passed to every Host (see wasmhost.Options).
	LogLevel  wasmhost.LogLevel
	LogWriter io.Writer
	// PollOneoff selects Envoy's poll_oneoff behaviour (default >= 1.39).
	PollOneoff wasmhost.PollOneoffMode
	// Stdout and Stderr receive the access logs configured to go to standard output or error
	// (default os.Stdout and os.Stderr).
	Stdout, Stderr io.Writer
}

// Server serves one configuration. Its methods are safe for concurrent use.
type Server struct {
	cfg       *envoyconf.Config
	shared    *wasmhost.SharedData
	metrics   *wasmhost.MetricStore
	listeners []*listener
	hosts     []*wasmhost.Host
	admin     *http.Server
	adminAddr string
	servers   []*http.Server
	live      atomic.Bool
	notes     []string
	started   time.Time
	workers   int
}

// listener is one served Envoy listener.
type listener struct {
	conf      *envoyconf.Listener
	host      *wasmhost.Host
	upstreams map[string]*url.URL // cluster name -> base URL
	addr      string
	accessLog []*accessLog // the connection manager's access logs
}

// Start loads every listener's filter into a wasmhost.Host, binds the listeners and the
// admin interface, and serves them until Close. A filter the plugin refuses (a bad
// configuration) makes Start fail, as it makes Envoy refuse to start.
func Start(ctx context.Context, cfg *envoyconf.Config, opts Options) (*Server, error) {
	if opts.Workers <= 0 {
		opts.Workers = 2
	}
	s := &Server{cfg: cfg, shared: opts.SharedData, metrics: wasmhost.NewMetricStore(), started: time.Now(), workers: opts.Workers}
	// /stats/prometheus extracts the bootstrap's stats_tags as Envoy does.
	tags := make([]wasmhost.TagSpecifier, len(cfg.StatsTags))
	for i, t := range cfg.StatsTags {
		tags[i] = wasmhost.TagSpecifier{Name: t.Name, Regex: t.Regex, FixedValue: t.FixedValue}
	}
	s.metrics.SetStatsTags(tags)
	if s.shared == nil {
		s.shared = wasmhost.NewSharedData()
	}
	clusters := cfg.ClusterURLs()
	upstreams := map[string]*url.URL{}
	for name, raw := range clusters {
		u, err := url.Parse(raw)
		if err != nil {
			return nil, fmt.Errorf("envoyhost: cluster %s: %w", name, err)
		}
		upstreams[name] = u
	}
	ok := false
	defer func() {
		if !ok {
			_ = s.Close(context.Background())
		}
	}()
	for _, lc := range cfg.Listeners {
		f := lc.Filter
		if f == nil {
			return nil, fmt.Errorf("envoyhost: listener %s has no Wasm filter; the wazero host serves only listeners that run one", lc.Name)
		}
		if f.FailurePolicy != "FAIL_CLOSED" {
			s.notes = append(s.notes, fmt.Sprintf("listener %s: failure_policy %s is not modelled; the wazero host fails closed (503) after a trap", lc.Name, f.FailurePolicy))
		}
		wasm := opts.Wasm
		if wasm == nil {
			wasm = f.Code
		}
		if wasm == nil {
			b, err := os.ReadFile(f.CodeFile)
			if err != nil {
				return nil, fmt.Errorf("envoyhost: listener %s: the filter's code: %w", lc.Name, err)
			}
			wasm = b
		}
		h, err := wasmhost.New(ctx, wasm, wasmhost.Options{
			Workers:      opts.Workers,
			VMID:         f.VMID,
			PluginName:   f.PluginName,
			RootID:       f.RootID,
			VMConfig:     f.VMConfig,
			PluginConfig: f.PluginConfig,
			Env:          f.Env,
			Clusters:     clusters,
			SharedData:   s.shared,
			MetricStore:  s.metrics,
			LogLevel:     opts.LogLevel,
			LogWriter:    opts.LogWriter,
			PollOneoff:   opts.PollOneoff,
		})
		if err != nil {
			return nil, fmt.Errorf("envoyhost: listener %s: %w", lc.Name, err)
		}
		s.hosts = append(s.hosts, h)
		ln := &listener{conf: lc, host: h, upstreams: upstreams}
		for i, path := range lc.AccessLogs {
			format := ""
			if i < len(lc.AccessLogFormats) {
				format = lc.AccessLogFormats[i]
			}
			al, unknown, err := openAccessLog(path, format, opts)
			if err != nil {
				return nil, fmt.Errorf("envoyhost: listener %s: access log: %w", lc.Name, err)
			}
			for _, op := range unknown {
				s.notes = append(s.notes, fmt.Sprintf("listener %s: access_log[%d]: %%%s%% is not rendered by the wazero host; it prints \"-\"", lc.Name, i, op))
			}
			ln.accessLog = append(ln.accessLog, al)
		}
		s.listeners = append(s.listeners, ln)
	}
	for _, l := range s.listeners {
		ln, err := listen(l.conf.Address, opts)
		if err != nil {
			return nil, fmt.Errorf("envoyhost: listener %s: %w", l.conf.Name, err)
		}
		l.addr = ln.Addr().String()
		s.serve(ln, l)
	}
	if cfg.Admin != "" {
		ln, err := listen(cfg.Admin, opts)
		if err != nil {
			return nil, fmt.Errorf("envoyhost: admin: %w", err)
		}
		s.adminAddr = ln.Addr().String()
		s.serve(ln, s.adminHandler())
	}
	s.live.Store(true)
	ok = true
	return s, nil
}

func listen(addr string, opts Options) (net.Listener, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	if opts.Bind != "" {
		host = opts.Bind
	}
	if opts.EphemeralPorts {
		port = "0"
	}
	return net.Listen("tcp", net.JoinHostPort(host, port))
}

func (s *Server) serve(ln net.Listener, h http.Handler) {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	s.servers = append(s.servers, srv)
	go func() { _ = srv.Serve(ln) }()
}

// ServeHTTP routes one request like Envoy's connection manager and router: normalise the
// path (or answer 400 or 307 as path_with_escaped_slashes_action says), pick the route (no route: the filter still runs and the router answers 404), then
// the filter unless the route disables it, then the route's cluster or direct response.
func (l *listener) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var entry *logEntry
	if len(l.accessLog) > 0 {
		rec := &recorder{ResponseWriter: w, status: http.StatusOK}
		entry = &logEntry{start: time.Now(), r: r, rec: rec}
		defer func() {
			for _, al := range l.accessLog {
				al.write(entry)
			}
		}()
		w = rec
	}
	raw := r.RequestURI
	if raw == "" || !strings.HasPrefix(raw, "/") {
		raw = r.URL.RequestURI()
	}
	path, verdict := l.conf.NormalizeRequest(raw)
	if verdict == envoyconf.PathRedirect && strings.HasPrefix(r.Header.Get("content-type"), "application/grpc") {
		verdict = envoyconf.PathReject // gRPC clients do not follow redirects; Envoy refuses them
	}
	switch verdict {
	case envoyconf.PathReject:
		// Envoy answers before any filter runs (downstream_rq_failed_path_normalization).
		w.WriteHeader(http.StatusBadRequest)
		return
	case envoyconf.PathRedirect:
		// Envoy answers 307 with the unescaped, normalised path, before any filter runs
		// (downstream_rq_redirected_with_normalized_path).
		w.Header().Set("Location", path)
		w.WriteHeader(http.StatusTemporaryRedirect)
		return
	}
	if l.conf.UseRemoteAddress {
		appendForwardedFor(r)
	}
	t := wasmhost.RouteTarget{Path: path}
	rt := l.conf.Match(r, path)
	switch {
	case rt == nil:
		t.Direct = &wasmhost.UpstreamResponse{Status: http.StatusNotFound}
	default:
		t.Route = wasmhost.Route{Name: rt.Name, VirtualHost: rt.VirtualHost, Cluster: rt.Cluster, RouteMetadata: rt.Metadata}
		t.FilterDisabled = rt.FilterDisabled
		t.Timeout = rt.Timeout
		if t.Timeout == 0 {
			t.Timeout = 24 * time.Hour // Envoy: 0 disables the route timeout
		}
		if rt.Direct != nil {
			d := &wasmhost.UpstreamResponse{Status: rt.Direct.Status, Body: rt.Direct.Body}
			if len(rt.Direct.Body) > 0 {
				d.Headers = [][2]string{{"content-type", "text/plain"}}
			}
			t.Direct = d
		} else {
			t.Upstream = l.upstreams[rt.Cluster]
		}
	}
	if entry != nil {
		entry.route, entry.cluster = t.Route.Name, t.Route.Cluster
		t.OnResult = func(res *wasmhost.Result) {
			entry.res = res
			if res.Continued && t.Direct == nil && t.Upstream != nil {
				entry.upstream = t.Upstream.Host
			}
		}
	}
	l.host.ServeRoute(w, r, t)
}

// Addr returns the address a listener is bound to ("0.0.0.0:10000"), or "" for an unknown
// name.
func (s *Server) Addr(name string) string {
	for _, l := range s.listeners {
		if l.conf.Name == name {
			return l.addr
		}
	}
	return ""
}

// AdminAddr returns the address the admin interface is bound to, or "" when the bootstrap has
// none.
func (s *Server) AdminAddr() string { return s.adminAddr }

// URL returns the base URL ("http://host:port") a listener is served on, or "" for an
// unknown name. A listener bound to all interfaces is reported on the loopback address.
func (s *Server) URL(name string) string {
	for _, l := range s.listeners {
		if l.conf.Name == name {
			return baseURL(l.addr)
		}
	}
	return ""
}

// AdminURL returns the admin interface's base URL, or "" when the bootstrap has none.
func (s *Server) AdminURL() string {
	if s.adminAddr == "" {
		return ""
	}
	return baseURL(s.adminAddr)
}

func baseURL(addr string) string {
	host, port, _ := net.SplitHostPort(addr)
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		if ip.To4() != nil {
			host = "127.0.0.1"
		} else {
			host = "::1"
		}
	}
	return "http://" + net.JoinHostPort(host, port)
}

// Host returns the wasmhost.Host running a listener's filter, or nil.
func (s *Server) Host(listener string) *wasmhost.Host {
	for _, l := range s.listeners {
		if l.conf.Name == listener {
			return l.host
		}
	}
	return nil
}

// Metrics returns the Server's stats store (what /stats/prometheus shows).
func (s *Server) Metrics() *wasmhost.MetricStore { return s.metrics }

// SharedData returns the Server's shared-data store.
func (s *Server) SharedData() *wasmhost.SharedData { return s.shared }

// Notes lists what the Server runs differently from Envoy for this configuration (for
// example a failure_policy the wazero host does not model), on top of the configuration's
// own envoyconf warnings.
func (s *Server) Notes() []string {
	return append(append([]string(nil), s.cfg.Warnings...), s.notes...)
}

// Close stops the listeners (waiting for requests in flight, bounded by ctx) and closes every
// Host.
func (s *Server) Close(ctx context.Context) error {
	s.live.Store(false)
	var errs []error
	for _, srv := range s.servers {
		if err := srv.Shutdown(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	for _, h := range s.hosts {
		if err := h.Close(ctx); err != nil && !errors.Is(err, wasmhost.ErrClosed) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// appendForwardedFor appends the connection's peer to X-Forwarded-For, as Envoy's connection
// manager does under use_remote_address: the lines a client sent are joined with ", " and the
// peer's address (without its port) goes last, where a proxy behind this one trusts it.
func appendForwardedFor(r *http.Request) {
	peer := r.RemoteAddr
	if host, _, err := net.SplitHostPort(peer); err == nil {
		peer = host
	}
	xff := strings.Join(r.Header.Values("X-Forwarded-For"), ", ")
	if xff != "" {
		xff += ", "
	}
	r.Header.Set("X-Forwarded-For", xff+peer)
}
