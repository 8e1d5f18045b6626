// Command ratelimit-host runs the filter's .wasm module in the project's
// Envoy-like wazero host (package wasmhost), so the filter can be tried with
// curl without Envoy. It has two modes.
//
// With -envoy it serves an Envoy bootstrap the way Envoy would (package
// envoyhost): every listener on its address with its routes, the Wasm
// filter's plugin configuration, vm_id and root_id from the file, each route
// forwarded to its cluster, and the admin interface with /stats/prometheus
// and /ready. Cluster addresses can be overridden, since the file names
// docker compose services:
//
//	go run ./wasmhost/cmd/ratelimit-host -envoy envoy.yaml -echo -cluster webdis=127.0.0.1:7379
//
// Without -envoy it serves one listener with a plugin configuration file, and an admin
// interface (-admin, 127.0.0.1:9901 by default) with /stats, /stats/prometheus (labelled as
// envoy.yaml's stats_config makes them in Envoy) and /ready:
//
//	go run ./wasmhost/cmd/ratelimit-host -wasm build/ratelimit.wasm -config plugin.json -echo
//
// The check subcommand checks bootstraps before a deploy, with an exit status for CI (see
// package envoycheck):
//
//	go run ./wasmhost/cmd/ratelimit-host check envoy.yaml
//
// The import subcommand converts an envoyproxy/ratelimit configuration into a plugin
// configuration (see import.go):
//
//	go run ./wasmhost/cmd/ratelimit-host import ratelimit-config.yaml > plugin.json
//
// The routes subcommand prints each route of a bootstrap with the rules that can apply to it
// (the banner of `make run`).
//
// Every request goes through the filter on one of -workers VMs (round robin);
// requests the filter lets through are forwarded to -upstream (or to a
// bundled echo server with -echo). Callouts reach the clusters given with
// -cluster name=url; a plugin configuration with global rules whose
// redis.cluster has none is refused. Ctrl-C (SIGINT) or SIGTERM shuts down
// cleanly.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ratelimit-wasm/ratelimit/filter/config"
	"github.com/ratelimit-wasm/ratelimit/wasmhost"
	echoserver "github.com/ratelimit-wasm/ratelimit/wasmhost/echo"
	"github.com/ratelimit-wasm/ratelimit/wasmhost/envoyconf"
	"github.com/ratelimit-wasm/ratelimit/wasmhost/envoyhost"
)

// multiFlag collects a repeated flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(s string) error { *m = append(*m, s); return nil }

func main() {
	if len(os.Args) > 1 && os.Args[1] == "check" {
		os.Exit(runCheck(os.Args[2:], os.Stdout, os.Stderr))
	}
	if len(os.Args) > 1 && os.Args[1] == "import" {
		os.Exit(runImport(os.Args[2:], os.Stdout, os.Stderr))
	}
	if len(os.Args) > 1 && os.Args[1] == "routes" {
		os.Exit(runRoutes(os.Args[2:], os.Stdout, os.Stderr))
	}
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
		adminAddr  = flag.String("admin", "127.0.0.1:9901", "address of the admin interface (/ready, /stats, /stats/prometheus); empty for none")
		upstream   = flag.String("upstream", "", "upstream base URL, e.g. http://127.0.0.1:8081")
		echo       = flag.Bool("echo", false, "start a bundled echo upstream on a free port (instead of -upstream)")
		workers    = flag.Int("workers", 2, "number of worker VMs (Envoy's --concurrency)")
		logLevel   = flag.String("log-level", "info", "Envoy log level: trace, debug, info, warn, error, critical")
		pollMode   = flag.String("poll-oneoff", "1.39", "Envoy poll_oneoff behaviour: 1.39 (0 events) or 1.38 (ENOSYS)")
		envoyPath  = flag.String("envoy", "", "serve this Envoy bootstrap (e.g. envoy.yaml): its listeners, routes, clusters, filter configuration and admin interface")
		bind       = flag.String("bind", "", "with -envoy: listen on this host instead of each listener's and the admin's configured host (e.g. 127.0.0.1), keeping the ports")
		upCluster  = flag.String("upstream-cluster", "upstream", "with -envoy: the cluster that -upstream or -echo replaces")
		clusters   multiFlag
		routes     multiFlag
	)
	flag.Var(&clusters, "cluster", "callout cluster as name=url (repeatable), e.g. -cluster redis=http://127.0.0.1:7379; with -envoy it overrides the cluster's address (name=host:port or name=url)")
	flag.Var(&routes, "route", "route as /prefix=route_name (repeatable); the first matching prefix sets xds.route_name")
	flag.Parse()

	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if *envoyPath != "" {
		for _, name := range []string{"config", "vm-config", "vm-id", "listen", "route", "admin"} {
			if set[name] {
				return fmt.Errorf("-%s cannot be combined with -envoy: the Envoy configuration says it", name)
			}
		}
		if *upstream != "" && *echo {
			return errors.New("give at most one of -upstream URL or -echo")
		}
		return runEnvoy(envoyOptions{
			path: *envoyPath, wasmPath: *wasmPath, wasmSet: set["wasm"], bind: *bind,
			upstream: *upstream, echo: *echo, upstreamCluster: *upCluster,
			clusters: clusters, workers: *workers, logLevel: *logLevel, pollMode: *pollMode,
		})
	}
	// A flag that only the -envoy mode reads would otherwise be ignored without a word.
	for _, name := range []string{"bind", "upstream-cluster"} {
		if set[name] {
			return fmt.Errorf("-%s works only with -envoy", name)
		}
	}
	if (*upstream == "") == !*echo {
		return errors.New("give exactly one of -upstream URL or -echo (-h for every flag; the other commands: check, import, routes)")
	}
	level, ok := wasmhost.ParseLogLevel(*logLevel)
	if !ok {
		return fmt.Errorf("unknown -log-level %q", *logLevel)
	}
	poll, err := parsePollMode(*pollMode)
	if err != nil {
		return err
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
	clusterMap, err := clusterURLs(clusters)
	if err != nil {
		return err
	}
	if err := checkRedisCluster(pluginConfig, clusterMap); err != nil {
		return err
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
		srv := &http.Server{Handler: echoserver.Handler(), ReadHeaderTimeout: 10 * time.Second}
		servers = append(servers, srv)
		go func() { _ = srv.Serve(l) }()
		upstreamURL = "http://" + l.Addr().String()
	}
	up, err := url.Parse(upstreamURL)
	if err != nil || up.Scheme == "" || up.Host == "" {
		return fmt.Errorf("bad upstream URL %q", upstreamURL)
	}

	// The same labelled metrics as envoy.yaml's stats_config gives in Envoy.
	started := time.Now()
	store := wasmhost.NewMetricStore()
	store.SetStatsTags(filterStatsTags)
	startCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	h, err := wasmhost.New(startCtx, wasm, wasmhost.Options{
		MetricStore:  store,
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
		return withoutVMLog(err, level)
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
	fmt.Printf("try:\n  curl -i %s/\n", base)
	if *adminAddr != "" {
		al, err := net.Listen("tcp", *adminAddr)
		if err != nil {
			return errors.Join(fmt.Errorf("-admin: %w", err), h.Close(context.Background()))
		}
		info := envoyhost.AdminInfo{Clusters: clusterMap, Workers: h.Workers(), Started: started,
			Filters: []envoyhost.FilterInfo{{Listener: "listener", Name: "ratelimit", RootID: "ratelimit", VMID: *vmID, Configuration: pluginConfig}}}
		admin := &http.Server{Handler: envoyhost.AdminHandler(store, func() bool { return ctx.Err() == nil }, info),
			ReadHeaderTimeout: 10 * time.Second}
		servers = append(servers, admin)
		go func() { _ = admin.Serve(al) }()
		a := "http://" + al.Addr().String()
		fmt.Printf("admin:\n  %s/stats/prometheus  %s/stats  %s/config_dump  %s/ready\n", a, a, a, a)
	}
	for _, r := range routeTable {
		fmt.Printf("route %s* -> %s\n", r.PathPrefix, r.Name)
	}
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
	printMetrics(h, store)
	return err
}

// clusterURLs reads the -cluster flags of the plugin-configuration mode, each name=url.
// Without -envoy there is no cluster definition to supply the scheme: a bare host:port would
// fail every callout with 503, so it is refused.
func clusterURLs(flags []string) (map[string]string, error) {
	urls := map[string]string{}
	for _, c := range flags {
		name, u, ok := strings.Cut(c, "=")
		if !ok || name == "" || u == "" {
			return nil, fmt.Errorf("-cluster %q: want name=url", c)
		}
		if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
			return nil, fmt.Errorf("-cluster %q: want name=url with a scheme, e.g. %s=http://%s", c, name, u)
		}
		urls[name] = u
	}
	return urls, nil
}

// checkRedisCluster refuses a plugin configuration whose global rules would call a cluster
// that no -cluster flag gives an address: every callout to it would fail at once, and every
// global rule would answer with its failure mode on every request, silently. A configuration
// the filter refuses is left to the filter, whose errors name the bad fields.
func checkRedisCluster(pluginConfig []byte, clusters map[string]string) error {
	cfg, err := config.Parse(pluginConfig)
	if err != nil || cfg.Redis == nil {
		return nil
	}
	var global []string
	for _, r := range cfg.Rules {
		if r.Scope == config.ScopeGlobal {
			global = append(global, strconv.Quote(r.Name))
		}
	}
	if len(global) == 0 || clusters[cfg.Redis.Cluster] != "" {
		return nil
	}
	return fmt.Errorf("-config: redis.cluster %q has no address: every call to Redis would fail, and the global rules (%s) "+
		"would answer with their failure mode on every request; give -cluster %s=http://host:port (webdis)",
		cfg.Redis.Cluster, strings.Join(global, ", "), cfg.Redis.Cluster)
}

// filterStatsTags are envoy.yaml's stats_config.stats_tags: the filter's stat names carry the
// rule and the decision as ";rule=<rule>;decision=<decision>", which they make labels.
var filterStatsTags = []wasmhost.TagSpecifier{
	{Name: "rule", Regex: regexp.MustCompile(`(;rule=([^;]+))`)},
	{Name: "decision", Regex: regexp.MustCompile(`(;decision=([^;]+))`)},
}

// printMetrics shows what the filter counted at shutdown, like Envoy's /stats (histograms
// with their quantiles, count and sum).
func printMetrics(h *wasmhost.Host, store *wasmhost.MetricStore) {
	envoyhost.WriteStats(os.Stdout, store)
	st := h.Stats()
	fmt.Printf("traps: %d, failed VMs: %v\n", st.Traps, st.FailedVMs)
}

// envoyOptions are the flags of the -envoy mode.
type envoyOptions struct {
	path, wasmPath     string
	wasmSet            bool
	bind               string
	upstream           string
	echo               bool
	upstreamCluster    string
	clusters           []string
	workers            int
	logLevel, pollMode string
}

// withoutVMLog is a start-up error without the VM log lines it carries, when the host has
// already written them to stderr as they came (a log level of warn or below), so that a
// refused configuration's errors are printed once.
func withoutVMLog(err error, level wasmhost.LogLevel) error {
	msg, _, cut := strings.Cut(err.Error(), "\nVM log:")
	if !cut || level > wasmhost.LogWarn {
		return err
	}
	return errors.New(msg)
}

// runEnvoy serves an Envoy bootstrap until SIGINT or SIGTERM.
func runEnvoy(o envoyOptions) error {
	level, ok := wasmhost.ParseLogLevel(o.logLevel)
	if !ok {
		return fmt.Errorf("unknown -log-level %q", o.logLevel)
	}
	poll, err := parsePollMode(o.pollMode)
	if err != nil {
		return err
	}
	cfg, err := envoyconf.Load(o.path)
	if err != nil {
		return err
	}
	// The module: -wasm when given, else the file the configuration names (in Envoy's
	// container layout that path, /etc/envoy/ratelimit.wasm, rarely exists locally, so the
	// default -wasm build/ratelimit.wasm is used when it does not).
	var wasm []byte
	if o.wasmSet || !codeFilesExist(cfg) {
		if wasm, err = os.ReadFile(o.wasmPath); err != nil {
			return fmt.Errorf("%w (build it with: make build)", err)
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	var echoSrv *http.Server
	switch {
	case o.echo:
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		echoSrv = &http.Server{Handler: echoserver.Handler(), ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = echoSrv.Serve(l) }()
		defer echoSrv.Close()
		if err := cfg.Override(o.upstreamCluster, l.Addr().String()); err != nil {
			return err
		}
	case o.upstream != "":
		if err := cfg.Override(o.upstreamCluster, o.upstream); err != nil {
			return err
		}
	}
	for _, c := range o.clusters {
		name, addr, ok := strings.Cut(c, "=")
		if !ok || name == "" || addr == "" {
			return fmt.Errorf("-cluster %q: want name=host:port or name=url", c)
		}
		if err := cfg.Override(name, addr); err != nil {
			return err
		}
	}

	startCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	srv, err := envoyhost.Start(startCtx, cfg, envoyhost.Options{
		Wasm:       wasm,
		Workers:    o.workers,
		Bind:       o.bind,
		LogLevel:   level,
		LogWriter:  os.Stderr,
		PollOneoff: poll,
	})
	cancel()
	if err != nil {
		return withoutVMLog(err, level)
	}

	fmt.Printf("ratelimit-host: serving %s with %d worker VM(s) per filter\n", o.path, o.workers)
	// Each address as bound (0.0.0.0:10000 is every interface), with the URL to try it on.
	for _, l := range cfg.Listeners {
		fmt.Printf("  listener %-18s %s  bound %s  (vm_id %s, root_id %s)\n", l.Name, srv.URL(l.Name), srv.Addr(l.Name), l.Filter.VMID, l.Filter.RootID)
	}
	if a := srv.AdminURL(); a != "" {
		fmt.Printf("  admin    %-18s %s/stats/prometheus  %s/ready  %s/config_dump  bound %s\n", "", a, a, a, srv.AdminAddr())
	}
	names := make([]string, 0, len(cfg.Clusters))
	for name := range cfg.Clusters {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Printf("  cluster  %-18s %s\n", name, cfg.Clusters[name].Address)
	}
	for _, n := range srv.Notes() {
		fmt.Printf("  note: %s\n", n)
	}

	<-ctx.Done()
	fmt.Println("\nratelimit-host: shutting down")
	shutCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return srv.Close(shutCtx)
}

// codeFilesExist reports whether every filter's module file exists on this machine.
func codeFilesExist(cfg *envoyconf.Config) bool {
	for _, l := range cfg.Listeners {
		if l.Filter == nil || l.Filter.Code != nil {
			continue
		}
		if _, err := os.Stat(l.Filter.CodeFile); err != nil {
			return false
		}
	}
	return true
}

func parsePollMode(s string) (wasmhost.PollOneoffMode, error) {
	switch s {
	case "1.39":
		return wasmhost.PollOneoffEnvoy139, nil
	case "1.38":
		return wasmhost.PollOneoffEnvoy138, nil
	}
	return 0, fmt.Errorf("unknown -poll-oneoff %q (1.39 or 1.38)", s)
}
