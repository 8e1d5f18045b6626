// Command ratelimit-host runs the filter's .wasm module in the project's
// Envoy-like wazero host (package wasmhost) behind a local HTTP listener, so
// the filter can be tried with curl without Envoy:
//
//	go run ./cmd/ratelimit-host -wasm build/ratelimit.wasm -config plugin.json -echo
//
// Every request goes through the filter on one of -workers VMs (round robin);
// requests the filter lets through are forwarded to -upstream (or to a
// bundled echo server with -echo). Callouts reach the clusters given with
// -cluster name=url. Ctrl-C (SIGINT) or SIGTERM shuts down cleanly.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/ratelimit-wasm/ratelimit/wasmhost"
)

// multiFlag collects a repeated flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(s string) error { *m = append(*m, s); return nil }

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "ratelimit-host:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		wasmPath   = flag.String("wasm", "build/ratelimit.wasm", "the filter module (build it with: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o build/ratelimit.wasm .)")
		configPath = flag.String("config", "", "plugin configuration file (JSON), passed as the plugin configuration")
		vmConfig   = flag.String("vm-config", "", "VM configuration string (vm_config.configuration)")
		vmID       = flag.String("vm-id", "ratelimit", "vm_config.vm_id: the shared-data namespace")
		listen     = flag.String("listen", "127.0.0.1:10000", "address of the proxy listener")
		upstream   = flag.String("upstream", "", "upstream base URL, e.g. http://127.0.0.1:8081")
		echo       = flag.Bool("echo", false, "start a bundled echo upstream on a free port (instead of -upstream)")
		workers    = flag.Int("workers", 2, "number of worker VMs (Envoy's --concurrency)")
		logLevel   = flag.String("log-level", "info", "Envoy log level: trace, debug, info, warn, error, critical")
		pollMode   = flag.String("poll-oneoff", "1.39", "Envoy poll_oneoff behaviour: 1.39 (0 events) or 1.38 (ENOSYS)")
		clusters   multiFlag
		routes     multiFlag
	)
	flag.Var(&clusters, "cluster", "callout cluster as name=url (repeatable), e.g. -cluster redis=http://127.0.0.1:7379")
	flag.Var(&routes, "route", "route as /prefix=route_name (repeatable); the first matching prefix sets xds.route_name")
	flag.Parse()

	if (*upstream == "") == !*echo {
		return errors.New("give exactly one of -upstream URL or -echo")
	}
	level, ok := wasmhost.ParseLogLevel(*logLevel)
	if !ok {
		return fmt.Errorf("unknown -log-level %q", *logLevel)
	}
	var poll wasmhost.PollOneoffMode
	switch *pollMode {
	case "1.39":
		poll = wasmhost.PollOneoffEnvoy139
	case "1.38":
		poll = wasmhost.PollOneoffEnvoy138
	default:
		return fmt.Errorf("unknown -poll-oneoff %q (1.39 or 1.38)", *pollMode)
	}
	wasm, err := os.ReadFile(*wasmPath)
	if err != nil {
		return fmt.Errorf("%w (build it with: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o build/ratelimit.wasm .)", err)
	}
	var pluginConfig []byte
	if *configPath != "" {
		if pluginConfig, err = os.ReadFile(*configPath); err != nil {
			return err
		}
	}
	clusterMap := map[string]string{}
	for _, c := range clusters {
		name, u, ok := strings.Cut(c, "=")
		if !ok || name == "" || u == "" {
			return fmt.Errorf("-cluster %q: want name=url", c)
		}
		clusterMap[name] = u
	}
	var routeTable []wasmhost.Route
	for _, r := range routes {
		prefix, name, ok := strings.Cut(r, "=")
		if !ok || !strings.HasPrefix(prefix, "/") {
			return fmt.Errorf("-route %q: want /prefix=route_name", r)
		}
		routeTable = append(routeTable, wasmhost.Route{PathPrefix: prefix, Name: name})
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	var servers []*http.Server
	upstreamURL := *upstream
	if *echo {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		srv := &http.Server{Handler: http.HandlerFunc(echoHandler), ReadHeaderTimeout: 10 * time.Second}
		servers = append(servers, srv)
		go func() { _ = srv.Serve(l) }()
		upstreamURL = "http://" + l.Addr().String()
	}
	up, err := url.Parse(upstreamURL)
	if err != nil || up.Scheme == "" || up.Host == "" {
		return fmt.Errorf("bad upstream URL %q", upstreamURL)
	}

	startCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	h, err := wasmhost.New(startCtx, wasm, wasmhost.Options{
		Workers:      *workers,
		VMID:         *vmID,
		PluginName:   "ratelimit",
		RootID:       "ratelimit",
		VMConfig:     []byte(*vmConfig),
		PluginConfig: pluginConfig,
		Clusters:     clusterMap,
		Routes:       routeTable,
		PollOneoff:   poll,
		LogLevel:     level,
		LogWriter:    os.Stderr,
	})
	cancel()
	if err != nil {
		return err
	}

	l, err := net.Listen("tcp", *listen)
	if err != nil {
		_ = h.Close(context.Background())
		return err
	}
	proxy := &http.Server{Handler: h.Handler(up), ReadHeaderTimeout: 10 * time.Second}
	servers = append(servers, proxy)
	go func() { _ = proxy.Serve(l) }()

	base := "http://" + l.Addr().String()
	fmt.Printf("ratelimit-host: %d worker VM(s) running %s (ABI %s), upstream %s\n", h.Workers(), *wasmPath, h.ABIVersion(), upstreamURL)
	fmt.Printf("try:\n  curl -i %s/\n  curl -i %s/deny\n  curl -i %s/callout\n", base, base, base)
	for name, u := range clusterMap {
		fmt.Printf("cluster %s -> %s\n", name, u)
	}
	fmt.Println("Ctrl-C to stop")

	<-ctx.Done()
	fmt.Println("\nratelimit-host: shutting down")
	shutCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, s := range servers {
		_ = s.Shutdown(shutCtx)
	}
	err = h.Close(shutCtx)
	printMetrics(h)
	return err
}

// printMetrics shows what the filter counted, like Envoy's /stats.
func printMetrics(h *wasmhost.Host) {
	ms := h.Metrics()
	sort.Slice(ms, func(i, j int) bool { return ms[i].Name < ms[j].Name })
	for _, m := range ms {
		fmt.Printf("%s: %d\n", m.Name, m.Value)
	}
	st := h.Stats()
	fmt.Printf("traps: %d, failed VMs: %v\n", st.Traps, st.FailedVMs)
}

// echoHandler answers with the request it received as JSON, so the headers
// the filter added are visible.
func echoHandler(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	headers := map[string][]string{}
	for k, v := range r.Header {
		headers[strings.ToLower(k)] = v
	}
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(map[string]any{
		"method":  r.Method,
		"path":    r.URL.RequestURI(),
		"host":    r.Host,
		"headers": headers,
		"body":    string(body),
	}); err != nil {
		log.Printf("echo: %v", err)
	}
}
