package envoyhost

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/ratelimit-wasm/ratelimit/filter/config"
	"github.com/ratelimit-wasm/ratelimit/wasmhost"
	"github.com/ratelimit-wasm/ratelimit/wasmhost/effective"
)

// AdminInfo is what the admin interface reports beyond the stats: the clusters (name to
// address) for /clusters, the filters for /config_dump, and the worker count for
// /server_info.
type AdminInfo struct {
	Clusters map[string]string
	Filters  []FilterInfo
	Workers  int
	Started  time.Time
}

// FilterInfo is one Wasm filter as /config_dump shows it.
type FilterInfo struct {
	Listener, Name, RootID, VMID string
	// Configuration is the plugin configuration as the filter receives it.
	Configuration []byte
}

// adminHandler serves the Server's admin interface.
func (s *Server) adminHandler() http.Handler {
	info := AdminInfo{Clusters: map[string]string{}, Workers: s.workers, Started: s.started}
	for name, c := range s.cfg.Clusters {
		info.Clusters[name] = c.Address
	}
	for _, l := range s.cfg.Listeners {
		if f := l.Filter; f != nil {
			info.Filters = append(info.Filters, FilterInfo{Listener: l.Name, Name: f.PluginName, RootID: f.RootID,
				VMID: f.VMID, Configuration: f.PluginConfig})
		}
	}
	return AdminHandler(s.metrics, s.live.Load, info)
}

// AdminHandler serves the subset of Envoy's admin interface that operators and tests use with
// this filter, over a metric store: /ready, /stats (with ?filter=REGEX), /stats/prometheus,
// /clusters, /config_dump and /server_info. live says whether /ready answers LIVE. The
// envoy.yaml mode and the plugin configuration mode of cmd/ratelimit-host serve it.
func AdminHandler(metrics *wasmhost.MetricStore, live func() bool, info AdminInfo) http.Handler {
	if info.Started.IsZero() {
		info.Started = time.Now()
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { serveAdmin(metrics, live, info, w, r) })
}

func serveAdmin(metrics *wasmhost.MetricStore, live func() bool, info AdminInfo, w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/ready":
		if live() {
			_, _ = io.WriteString(w, "LIVE\n")
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, "DRAINING\n")
	case "/stats/prometheus":
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_ = metrics.WritePrometheus(w)
	case "/stats":
		var re *regexp.Regexp
		if f := queryParam(r.URL.RawQuery, "filter"); f != "" {
			var err error
			if re, err = regexp.Compile(f); err != nil {
				http.Error(w, "Invalid regex: "+err.Error(), http.StatusBadRequest)
				return
			}
		}
		w.Header().Set("Content-Type", "text/plain")
		writeStats(w, metrics, re)
	case "/clusters":
		w.Header().Set("Content-Type", "text/plain")
		writeClusters(w, info.Clusters)
	case "/config_dump":
		writeJSON(w, configDump(info.Filters))
	case "/server_info":
		state := "LIVE"
		if !live() {
			state = "DRAINING"
		}
		uptime := fmt.Sprintf("%ds", int64(time.Since(info.Started).Seconds()))
		writeJSON(w, map[string]any{
			"version": "ratelimit-wasm wazero host", "state": state,
			"uptime_current_epoch": uptime, "uptime_all_epochs": uptime,
			"command_line_options": map[string]any{"concurrency": info.Workers},
		})
	case "/":
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, "ratelimit-wasm wazero host admin\n  /ready\n  /stats (?filter=REGEX)\n  /stats/prometheus\n"+
			"  /clusters\n  /config_dump\n  /server_info\n")
	default:
		http.NotFound(w, r)
	}
}

// writeClusters prints each cluster's endpoint as Envoy's /clusters does, sorted by name:
// "<cluster>::<host:port>::health_flags::healthy" (the wazero host does no health checking)
// and its weight.
func writeClusters(w io.Writer, clusters map[string]string) {
	names := make([]string, 0, len(clusters))
	for name := range clusters {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Fprintf(w, "%s::observability_name::%s\n", name, name)
		fmt.Fprintf(w, "%s::%s::health_flags::healthy\n", name, clusters[name])
		fmt.Fprintf(w, "%s::%s::weight::1\n", name, clusters[name])
	}
}

// configDump is /config_dump's answer: each Wasm filter's plugin configuration in force, as
// given and as the filter reads it (its effective configuration: defaults filled in, per-rule
// values resolved; see package effective).
func configDump(filters []FilterInfo) map[string]any {
	var dump []map[string]any
	for _, f := range filters {
		d := map[string]any{"listener": f.Listener, "name": f.Name, "root_id": f.RootID, "vm_id": f.VMID,
			"configuration": string(f.Configuration)}
		if c, err := config.Parse(f.Configuration); err == nil {
			if b, err := effective.JSON(c); err == nil {
				d["effective_configuration"] = json.RawMessage(b)
			}
		}
		dump = append(dump, d)
	}
	return map[string]any{"configs": []any{map[string]any{
		"@type": "type.googleapis.com/ratelimit_wasm.WasmFiltersConfigDump", "filters": dump}}}
}

// queryParam returns the query parameter name of the raw query, unescaped. Parameters are
// split at '&' only: a stat name's ';' (";rule=") is part of the value, where url.ParseQuery
// would refuse the whole pair.
func queryParam(raw, name string) string {
	for _, kv := range strings.Split(raw, "&") {
		k, v, _ := strings.Cut(kv, "=")
		if k == name {
			if u, err := url.QueryUnescape(v); err == nil {
				return u
			}
			return v
		}
	}
	return ""
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// WriteStats prints "name: value" lines sorted by name, like Envoy's /stats; a histogram
// prints its count, sum and a few quantiles of the retained samples.
func WriteStats(w io.Writer, metrics *wasmhost.MetricStore) { writeStats(w, metrics, nil) }

// writeStats is WriteStats of the stats whose names re matches (all with nil), as Envoy's
// /stats?filter=REGEX.
func writeStats(w io.Writer, metrics *wasmhost.MetricStore, re *regexp.Regexp) {
	ms := metrics.Metrics()
	sort.Slice(ms, func(i, j int) bool { return ms[i].Name < ms[j].Name })
	for _, m := range ms {
		if re != nil && !re.MatchString(m.Name) {
			continue
		}
		if m.Type != wasmhost.MetricHistogram {
			fmt.Fprintf(w, "%s: %d\n", m.Name, m.Value)
			continue
		}
		h, _ := metrics.Histogram(m.Name)
		vals := append([]uint64(nil), h.Values...)
		sort.Slice(vals, func(i, j int) bool { return vals[i] < vals[j] })
		q := func(p float64) string {
			if len(vals) == 0 {
				return "nan"
			}
			return fmt.Sprint(vals[int(p*float64(len(vals)-1))])
		}
		fmt.Fprintf(w, "%s: P0(%s) P50(%s) P90(%s) P99(%s) P100(%s) count(%d) sum(%d)\n",
			m.Name, q(0), q(0.5), q(0.9), q(0.99), q(1), h.Count, h.Sum)
	}
}
