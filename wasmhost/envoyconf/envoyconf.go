// Package envoyconf reads an Envoy bootstrap (envoy.yaml) into what the project's wazero host
// needs to serve the same traffic the same way: the listeners and their addresses, the route
// tables with named routes, the clusters and their addresses, and the rate-limit Wasm filter
// with its plugin configuration, vm_id, root_id and plugin name.
//
// The file is first parsed into Envoy's own v3 Bootstrap message and validated with the API's
// rules (ParseBootstrap), so a file this package accepts is one Envoy's config loader accepts
// too, as far as the protos can tell. From that message it takes a documented subset:
//
//   - static listeners with a socket address and one filter chain whose only network filter
//     is the HTTP connection manager with an inline route_config (no RDS, no SNI matching);
//   - in the connection manager: normalize_path, merge_slashes,
//     path_with_escaped_slashes_action, strip_any_host_port /
//     strip_matching_host_port, and the HTTP filters: at most one Wasm filter (the rate
//     limiter) and the router; other HTTP filters are listed in Config.Warnings, since the
//     wazero host does not run them;
//   - virtual hosts (name, domains with Envoy's wildcard rules) and routes: the name, the
//     match (prefix, path, path_separated_prefix, safe_regex; case_sensitive; headers with
//     string_match exact/prefix/suffix/contains/safe_regex, present_match, invert_match,
//     treat_missing_header_as_empty), the action (route.cluster with its timeout, or
//     direct_response), metadata, and typed_per_filter_config
//     envoy.config.route.v3.FilterConfig{disabled} at route, virtual host or route
//     configuration level;
//   - the Wasm filter's name, root_id, vm_config (vm_id, runtime, code file, configuration),
//     plugin configuration (StringValue, BytesValue or Struct, as Envoy passes them) and
//     failure_policy;
//   - static clusters with a load_assignment: the first endpoint's socket address.
//
// Anything in that subset the host cannot reproduce (query-parameter matching, weighted
// clusters, redirects, RDS...) is an error rather than a silent difference.
package envoyconf

import (
	"fmt"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	fileaccesslogv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/file/v3"
	streamaccesslogv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/stream/v3"
	wasmfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/wasm/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	wasmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/wasm/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Type URLs of the access loggers the host writes.
const (
	typeStdoutAccessLog = "type.googleapis.com/envoy.extensions.access_loggers.stream.v3.StdoutAccessLog"
	typeStderrAccessLog = "type.googleapis.com/envoy.extensions.access_loggers.stream.v3.StderrAccessLog"
	typeFileAccessLog   = "type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog"
)

// Type URLs of the typed configurations this package interprets.
const (
	TypeHTTPConnectionManager = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
	TypeWasmFilter            = "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm"
	TypeRouter                = "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
	TypeFilterConfig          = "type.googleapis.com/envoy.config.route.v3.FilterConfig"
)

// DefaultRouteTimeout is Envoy's route timeout when a route does not set one.
const DefaultRouteTimeout = 15 * time.Second

// Config is the part of an Envoy bootstrap the wazero host serves.
type Config struct {
	// Admin is the admin interface's address ("0.0.0.0:9901"), empty when the bootstrap has
	// no admin section.
	Admin string
	// Listeners are the static listeners in file order.
	Listeners []*Listener
	// Clusters maps each static cluster's name to its first endpoint.
	Clusters map[string]*Cluster
	// Warnings lists what the file configures that the wazero host ignores (HTTP filters it
	// does not implement, extra endpoints of a cluster...). Envoy would honour them.
	Warnings []string
	// StatsTags are stats_config.stats_tags: the tags Envoy's tag extraction takes out of
	// stat names (labels in its Prometheus output), in file order.
	StatsTags []StatsTag
	// Bootstrap is the validated message everything above was read from.
	Bootstrap *bootstrapv3.Bootstrap
}

// StatsTag is one stats_config.stats_tags entry: a tag whose value a regular expression
// extracts from stat names (the first capture group is removed from the name; the value is
// the second group, or the first when there is one), or a fixed value every stat carries.
type StatsTag struct {
	Name       string
	Regex      *regexp.Regexp // nil for a fixed value
	FixedValue string
}

// Cluster is a static cluster reduced to one address.
type Cluster struct {
	// Name is the cluster's name, as routes and callouts refer to it.
	Name string
	// Address is the first endpoint's "host:port" (host may be a DNS name, as with
	// STRICT_DNS clusters), or what Override set.
	Address string
	// ConnectTimeout is the cluster's connect_timeout (Envoy's default 5s when unset).
	ConnectTimeout time.Duration
}

// Listener is one static listener running the HTTP connection manager.
type Listener struct {
	// Name is the listener's name (Server.URL and Server.Host look listeners up by it).
	Name string
	// Address is the listener's "host:port".
	Address string
	// StatPrefix is the connection manager's stat_prefix.
	StatPrefix string
	// RouteConfigName is the inline route_config's name.
	RouteConfigName string
	// VirtualHosts in file order; see Match for how one is chosen.
	VirtualHosts []*VirtualHost
	// Filter is the rate-limit Wasm filter, nil when the listener has none.
	Filter *WasmFilter
	// NormalizePath and MergeSlashes are the connection manager's path normalisation
	// switches; StripPort is set by strip_any_host_port or strip_matching_host_port.
	NormalizePath, MergeSlashes, StripPort bool
	// EscapedSlashes is path_with_escaped_slashes_action by its enum name (EscapedSlashes*
	// constants); unset is Envoy's default, KEEP_UNCHANGED.
	EscapedSlashes string
	// AccessLogs are the connection manager's access logs the host writes: where each one
	// goes ("/dev/stdout", "/dev/stderr" or a file path), one line per request.
	AccessLogs []string
	// AccessLogFormats are the access logs' text formats, by the index of AccessLogs: the
	// log_format's text_format_source inline string (or text_format), "" for Envoy's default.
	AccessLogFormats []string
	// UseRemoteAddress is the connection manager's use_remote_address: Envoy then appends the
	// connection's peer to X-Forwarded-For.
	UseRemoteAddress bool
	// XFFTrustedHops is the connection manager's xff_num_trusted_hops: how many of the
	// rightmost X-Forwarded-For entries Envoy trusts when it derives the client address.
	XFFTrustedHops int
	// SkipXFFAppend is the connection manager's skip_xff_append: under use_remote_address,
	// Envoy then does not append the peer to X-Forwarded-For.
	SkipXFFAppend bool
}

// WasmFilter is the Wasm HTTP filter of a listener, with what the host needs to load the
// module the way Envoy does.
type WasmFilter struct {
	// FilterName is the HTTP filter's name: the key of its typed_per_filter_config.
	FilterName string
	// PluginName and RootID are the plugin's name and root_id.
	PluginName, RootID string
	// VMID is vm_config.vm_id, the shared-data namespace; Runtime is vm_config.runtime.
	VMID, Runtime string
	// CodeFile is the module's local file name (vm_config.code.local.filename); empty when
	// the code is inline or remote.
	CodeFile string
	// Code is the module when given inline (inline_bytes or inline_string).
	Code []byte
	// PluginConfig and VMConfig are the configurations as the plugin receives them: a
	// StringValue's or BytesValue's content, a Struct serialized as JSON.
	PluginConfig, VMConfig []byte
	// Env is vm_config.environment_variables.key_values.
	Env map[string]string
	// FailurePolicy is "FAIL_CLOSED", "FAIL_OPEN" or "FAIL_RELOAD" (the deprecated
	// fail_open is FAIL_OPEN; UNSPECIFIED is reported as FAIL_CLOSED).
	FailurePolicy string
	// DisabledByDefault is the HTTP filter's disabled flag: the filter then runs only on
	// routes whose FilterConfig enables it.
	DisabledByDefault bool
}

// VirtualHost is one virtual host of a route table.
type VirtualHost struct {
	Name    string   // the xds.virtual_host_name property
	Domains []string // lower-cased, with Envoy's wildcards ("*", "*suffix", "prefix*")
	Routes  []*Route // in file order: the first match wins
}

// Route is one route with what the host needs to serve it.
type Route struct {
	// Name is the route's name (the xds.route_name property).
	Name string
	// VirtualHost is the name of the virtual host the route belongs to
	// (xds.virtual_host_name).
	VirtualHost string
	// Match is how requests are matched.
	Match RouteMatch
	// Cluster is the target cluster (xds.cluster_name); empty for a direct response.
	Cluster string
	// Timeout is the route timeout (DefaultRouteTimeout when unset; 0 disables it).
	Timeout time.Duration
	// Direct is set when the route answers by itself (direct_response).
	Direct *DirectResponse
	// FilterDisabled is true when the rate-limit filter does not run on this route.
	FilterDisabled bool
	// Metadata is the route's metadata serialized as envoy.config.core.v3.Metadata (the
	// xds.route_metadata property); nil when the route has none.
	Metadata []byte
}

// DirectResponse is a route's direct_response.
type DirectResponse struct {
	Status int    // the HTTP status
	Body   []byte // inline_string or inline_bytes; nil without a body
}

// RouteMatch is a route's match condition.
type RouteMatch struct {
	// Kind says which path specifier the route has, and Value is its argument: the prefix,
	// the path or the regular expression (lower-cased unless CaseSensitive or a regex).
	Kind  PathMatchKind
	Value string
	regex *regexp.Regexp
	// CaseSensitive is the match's case_sensitive (true when unset, as in Envoy).
	CaseSensitive bool
	// Headers must all hold as well.
	Headers []HeaderMatcher
}

// PathMatchKind is how a route matches the path.
type PathMatchKind int

// The path match kinds.
const (
	PathPrefix PathMatchKind = iota + 1
	PathExact
	PathSeparatedPrefix
	PathRegex
)

// String names the kind as the route field does.
func (k PathMatchKind) String() string {
	switch k {
	case PathPrefix:
		return "prefix"
	case PathExact:
		return "path"
	case PathSeparatedPrefix:
		return "path_separated_prefix"
	case PathRegex:
		return "safe_regex"
	}
	return "unknown"
}

// HeaderMatcher is one header condition of a route match.
type HeaderMatcher struct {
	// Name is the header's name, lower-cased; pseudo-headers such as :method are allowed.
	Name string
	// Kind is "exact", "prefix", "suffix", "contains", "regex" or "present".
	Kind string
	// Value is what Kind compares with (lower-cased when IgnoreCase); unused for "present".
	Value string
	regex *regexp.Regexp
	// IgnoreCase is the string matcher's ignore_case (never set for "regex", on which Envoy
	// ignores it).
	IgnoreCase bool
	// Present is the present_match value (Kind "present").
	Present bool
	// Invert is invert_match.
	Invert bool
	// MissingAsEmpty is treat_missing_header_as_empty.
	MissingAsEmpty bool
}

// Load reads and interprets the bootstrap file at path.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("envoyconf: %w", err)
	}
	c, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// Parse interprets a bootstrap in YAML: ParseBootstrap, then FromBootstrap.
func Parse(data []byte) (*Config, error) {
	bs, err := ParseBootstrap(data)
	if err != nil {
		return nil, err
	}
	return FromBootstrap(bs)
}

// FromBootstrap extracts the served subset from a validated bootstrap.
func FromBootstrap(bs *bootstrapv3.Bootstrap) (*Config, error) {
	c := &Config{Clusters: map[string]*Cluster{}, Bootstrap: bs}
	if a := bs.GetAdmin().GetAddress(); a != nil {
		addr, err := socketAddress(a)
		if err != nil {
			return nil, fmt.Errorf("envoyconf: admin.address: %w", err)
		}
		c.Admin = addr
	}
	for i, t := range bs.GetStatsConfig().GetStatsTags() {
		st := StatsTag{Name: t.GetTagName(), FixedValue: t.GetFixedValue()}
		switch {
		case t.GetRegex() != "":
			re, err := regexp.Compile(t.GetRegex())
			if err != nil {
				return nil, fmt.Errorf("envoyconf: stats_config.stats_tags[%d].regex: %w", i, err)
			}
			if re.NumSubexp() < 1 {
				return nil, fmt.Errorf("envoyconf: stats_config.stats_tags[%d].regex: needs a capture group (the part removed from the name)", i)
			}
			st.Regex = re
		case t.GetFixedValue() == "":
			// A tag name alone selects one of Envoy's default tags, which never match a Wasm
			// plugin's stats.
			c.Warnings = append(c.Warnings, fmt.Sprintf("stats_config.stats_tags[%d] (%s): a default tag; the wazero host ignores it", i, st.Name))
			continue
		}
		c.StatsTags = append(c.StatsTags, st)
	}
	sr := bs.GetStaticResources()
	for i, cl := range sr.GetClusters() {
		where := fmt.Sprintf("static_resources.clusters[%d] (%s)", i, cl.GetName())
		if _, dup := c.Clusters[cl.GetName()]; dup {
			return nil, fmt.Errorf("envoyconf: %s: duplicate cluster name", where)
		}
		out := &Cluster{Name: cl.GetName(), ConnectTimeout: 5 * time.Second}
		if ct := cl.GetConnectTimeout(); ct != nil {
			out.ConnectTimeout = ct.AsDuration()
		}
		var addrs []string
		for _, lle := range cl.GetLoadAssignment().GetEndpoints() {
			for _, lb := range lle.GetLbEndpoints() {
				if ep := lb.GetEndpoint(); ep != nil {
					a, err := socketAddress(ep.GetAddress())
					if err != nil {
						return nil, fmt.Errorf("envoyconf: %s: %w", where, err)
					}
					addrs = append(addrs, a)
				}
			}
		}
		if len(addrs) == 0 {
			c.Warnings = append(c.Warnings, where+": no static endpoint; give its address with an override")
		} else {
			out.Address = addrs[0]
			if len(addrs) > 1 {
				c.Warnings = append(c.Warnings, fmt.Sprintf("%s: %d endpoints; the wazero host uses only the first (%s)", where, len(addrs), addrs[0]))
			}
		}
		c.Clusters[out.Name] = out
	}
	for i, l := range sr.GetListeners() {
		ln, err := c.listener(l)
		if err != nil {
			return nil, fmt.Errorf("envoyconf: static_resources.listeners[%d] (%s): %w", i, l.GetName(), err)
		}
		c.Listeners = append(c.Listeners, ln)
	}
	// Every route's cluster must exist, as Envoy checks for static route tables.
	for _, ln := range c.Listeners {
		for _, vh := range ln.VirtualHosts {
			for _, r := range vh.Routes {
				if r.Cluster != "" && c.Clusters[r.Cluster] == nil {
					return nil, fmt.Errorf("envoyconf: listener %s, route %q: unknown cluster %q", ln.Name, r.Name, r.Cluster)
				}
			}
		}
	}
	return c, nil
}

func socketAddress(a *corev3.Address) (string, error) {
	sa := a.GetSocketAddress()
	if sa == nil {
		return "", fmt.Errorf("only socket_address is supported")
	}
	if sa.GetNamedPort() != "" {
		return "", fmt.Errorf("named_port is not supported")
	}
	return net.JoinHostPort(sa.GetAddress(), strconv.FormatUint(uint64(sa.GetPortValue()), 10)), nil
}

func (c *Config) listener(l *listenerv3.Listener) (*Listener, error) {
	if l.GetAddress() == nil {
		return nil, fmt.Errorf("a static listener needs an address")
	}
	addr, err := socketAddress(l.GetAddress())
	if err != nil {
		return nil, fmt.Errorf("address: %w", err)
	}
	ln := &Listener{Name: l.GetName(), Address: addr}
	chains := l.GetFilterChains()
	if len(chains) != 1 || l.GetDefaultFilterChain() != nil {
		return nil, fmt.Errorf("exactly one filter_chain is supported, found %d", len(chains)+boolInt(l.GetDefaultFilterChain() != nil))
	}
	if chains[0].GetTransportSocket() != nil {
		c.Warnings = append(c.Warnings, fmt.Sprintf("listener %s: transport_socket (TLS) is ignored; the wazero host serves plain HTTP", l.GetName()))
	}
	filters := chains[0].GetFilters()
	if len(filters) != 1 || filters[0].GetTypedConfig().GetTypeUrl() != TypeHTTPConnectionManager {
		return nil, fmt.Errorf("the filter chain must hold exactly one network filter, the HTTP connection manager")
	}
	hcm := &hcmv3.HttpConnectionManager{}
	if err := filters[0].GetTypedConfig().UnmarshalTo(hcm); err != nil {
		return nil, fmt.Errorf("http_connection_manager: %w", err)
	}
	ln.StatPrefix = hcm.GetStatPrefix()
	ln.NormalizePath = hcm.GetNormalizePath().GetValue()
	ln.MergeSlashes = hcm.GetMergeSlashes()
	ln.EscapedSlashes = EscapedSlashesKeep
	if a := hcm.GetPathWithEscapedSlashesAction(); a != hcmv3.HttpConnectionManager_IMPLEMENTATION_SPECIFIC_DEFAULT {
		ln.EscapedSlashes = a.String()
	}
	ln.StripPort = hcm.GetStripAnyHostPort() || hcm.GetStripMatchingHostPort()
	ln.UseRemoteAddress = hcm.GetUseRemoteAddress().GetValue()
	ln.XFFTrustedHops = int(hcm.GetXffNumTrustedHops())
	ln.SkipXFFAppend = hcm.GetSkipXffAppend()
	for i, al := range hcm.GetAccessLog() {
		var format *corev3.SubstitutionFormatString
		switch url := al.GetTypedConfig().GetTypeUrl(); url {
		case typeStdoutAccessLog, typeStderrAccessLog:
			sl := &streamaccesslogv3.StdoutAccessLog{}
			path := "/dev/stdout"
			if url == typeStderrAccessLog {
				el := &streamaccesslogv3.StderrAccessLog{}
				if err := al.GetTypedConfig().UnmarshalTo(el); err != nil {
					return nil, fmt.Errorf("http_connection_manager.access_log[%d]: %w", i, err)
				}
				format, path = el.GetLogFormat(), "/dev/stderr"
			} else if err := al.GetTypedConfig().UnmarshalTo(sl); err != nil {
				return nil, fmt.Errorf("http_connection_manager.access_log[%d]: %w", i, err)
			} else {
				format = sl.GetLogFormat()
			}
			ln.AccessLogs = append(ln.AccessLogs, path)
		case typeFileAccessLog:
			f := &fileaccesslogv3.FileAccessLog{}
			if err := al.GetTypedConfig().UnmarshalTo(f); err != nil {
				return nil, fmt.Errorf("http_connection_manager.access_log[%d]: %w", i, err)
			}
			ln.AccessLogs = append(ln.AccessLogs, f.GetPath())
			format = f.GetLogFormat()
			if f.GetFormat() != "" {
				format = &corev3.SubstitutionFormatString{Format: &corev3.SubstitutionFormatString_TextFormat{TextFormat: f.GetFormat()}}
			}
		default:
			c.Warnings = append(c.Warnings, fmt.Sprintf("listener %s: access_log[%d] (%s) is ignored", l.GetName(), i, url))
			continue
		}
		text := format.GetTextFormatSource().GetInlineString()
		if text == "" {
			text = format.GetTextFormat()
		}
		if format != nil && text == "" {
			c.Warnings = append(c.Warnings, fmt.Sprintf("listener %s: access_log[%d]: the wazero host writes text formats given inline only; this one is written in Envoy's default format", l.GetName(), i))
		}
		ln.AccessLogFormats = append(ln.AccessLogFormats, text)
		if al.GetFilter() != nil {
			c.Warnings = append(c.Warnings, fmt.Sprintf("listener %s: access_log[%d].filter is ignored; every request is logged", l.GetName(), i))
		}
	}
	rc := hcm.GetRouteConfig()
	if rc == nil {
		return nil, fmt.Errorf("http_connection_manager: only an inline route_config is supported (no RDS or scoped routes)")
	}
	ln.RouteConfigName = rc.GetName()

	sawRouter := false
	for i, hf := range hcm.GetHttpFilters() {
		tc := hf.GetTypedConfig()
		switch {
		case tc.GetTypeUrl() == TypeWasmFilter:
			if ln.Filter != nil {
				return nil, fmt.Errorf("http_filters[%d]: only one Wasm filter per listener is supported", i)
			}
			if sawRouter {
				return nil, fmt.Errorf("http_filters[%d]: the Wasm filter comes after the router and would never run", i)
			}
			f, err := wasmFilter(hf.GetName(), tc, hf.GetDisabled())
			if err != nil {
				return nil, fmt.Errorf("http_filters[%d] (%s): %w", i, hf.GetName(), err)
			}
			ln.Filter = f
		case tc.GetTypeUrl() == TypeRouter:
			sawRouter = true
		default:
			what := tc.GetTypeUrl()
			if what == "" {
				what = "config_discovery"
			}
			c.Warnings = append(c.Warnings, fmt.Sprintf("listener %s: HTTP filter %s (%s) is not run by the wazero host", l.GetName(), hf.GetName(), what))
		}
	}
	if !sawRouter {
		return nil, fmt.Errorf("http_connection_manager: no router filter (envoy.filters.http.router)")
	}
	filterName := ""
	if ln.Filter != nil {
		filterName = ln.Filter.FilterName
	}
	rcDisabled, err := perFilterDisabled(rc.GetTypedPerFilterConfig(), filterName)
	if err != nil {
		return nil, fmt.Errorf("route_config.typed_per_filter_config: %w", err)
	}
	for i, vh := range rc.GetVirtualHosts() {
		v, err := virtualHost(vh, filterName, ln.Filter, rcDisabled)
		if err != nil {
			return nil, fmt.Errorf("route_config.virtual_hosts[%d] (%s): %w", i, vh.GetName(), err)
		}
		ln.VirtualHosts = append(ln.VirtualHosts, v)
	}
	return ln, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func wasmFilter(name string, tc *anypb.Any, disabled bool) (*WasmFilter, error) {
	w := &wasmfilterv3.Wasm{}
	if err := tc.UnmarshalTo(w); err != nil {
		return nil, err
	}
	pc := w.GetConfig()
	if pc == nil {
		return nil, fmt.Errorf("config is required")
	}
	vm := pc.GetVmConfig()
	if vm == nil {
		return nil, fmt.Errorf("config.vm_config is required")
	}
	f := &WasmFilter{
		FilterName:        name,
		PluginName:        pc.GetName(),
		RootID:            pc.GetRootId(),
		VMID:              vm.GetVmId(),
		Runtime:           vm.GetRuntime(),
		Env:               vm.GetEnvironmentVariables().GetKeyValues(),
		DisabledByDefault: disabled,
	}
	if local := vm.GetCode().GetLocal(); local != nil {
		switch {
		case local.GetFilename() != "":
			f.CodeFile = local.GetFilename()
		case local.GetInlineBytes() != nil:
			f.Code = local.GetInlineBytes()
		case local.GetInlineString() != "":
			f.Code = []byte(local.GetInlineString())
		default:
			return nil, fmt.Errorf("config.vm_config.code.local: only filename, inline_bytes and inline_string are supported")
		}
	} else {
		return nil, fmt.Errorf("config.vm_config.code: only local code is supported")
	}
	var err error
	if f.PluginConfig, err = pluginBytes(pc.GetConfiguration()); err != nil {
		return nil, fmt.Errorf("config.configuration: %w", err)
	}
	if f.VMConfig, err = pluginBytes(vm.GetConfiguration()); err != nil {
		return nil, fmt.Errorf("config.vm_config.configuration: %w", err)
	}
	// Envoy treats the deprecated fail_open as FAIL_OPEN. An unspecified policy is
	// FAIL_CLOSED, or FAIL_RELOAD when the runtime flag
	// envoy.reloadable_features.wasm_failure_reload_by_default is on; without a runtime
	// section to read, FAIL_CLOSED is reported (which is also what the wazero host does).
	switch {
	case pc.GetFailOpen():
		f.FailurePolicy = wasmv3.FailurePolicy_FAIL_OPEN.String()
	case pc.GetFailurePolicy() == wasmv3.FailurePolicy_UNSPECIFIED:
		f.FailurePolicy = wasmv3.FailurePolicy_FAIL_CLOSED.String()
	default:
		f.FailurePolicy = pc.GetFailurePolicy().String()
	}
	return f, nil
}

// pluginBytes renders a configuration Any the way Envoy hands it to the plugin:
// StringValue and BytesValue without their wrapper, Struct as JSON, anything else as the
// serialized message.
func pluginBytes(a *anypb.Any) ([]byte, error) {
	if a == nil {
		return nil, nil
	}
	m, err := a.UnmarshalNew()
	if err != nil {
		return nil, err
	}
	switch v := m.(type) {
	case *wrapperspb.StringValue:
		return []byte(v.GetValue()), nil
	case *wrapperspb.BytesValue:
		return v.GetValue(), nil
	case *structpb.Struct:
		return protojson.Marshal(v)
	default:
		return a.GetValue(), nil
	}
}

// perFilterDisabled reads the FilterConfig for the rate-limit filter from a
// typed_per_filter_config map: nil when it has none.
func perFilterDisabled(m map[string]*anypb.Any, filterName string) (*bool, error) {
	if filterName == "" {
		return nil, nil
	}
	a, ok := m[filterName]
	if !ok {
		return nil, nil
	}
	if a.GetTypeUrl() != TypeFilterConfig {
		return nil, fmt.Errorf("%s: the Wasm filter has no per-route configuration; use %s{disabled}", filterName, TypeFilterConfig)
	}
	fc := &routev3.FilterConfig{}
	if err := a.UnmarshalTo(fc); err != nil {
		return nil, fmt.Errorf("%s: %w", filterName, err)
	}
	if fc.GetConfig() != nil {
		return nil, fmt.Errorf("%s: FilterConfig.config is not supported for the Wasm filter", filterName)
	}
	d := fc.GetDisabled()
	return &d, nil
}

func virtualHost(vh *routev3.VirtualHost, filterName string, f *WasmFilter, rcDisabled *bool) (*VirtualHost, error) {
	v := &VirtualHost{Name: vh.GetName()}
	for _, d := range vh.GetDomains() {
		v.Domains = append(v.Domains, strings.ToLower(d))
	}
	vhDisabled, err := perFilterDisabled(vh.GetTypedPerFilterConfig(), filterName)
	if err != nil {
		return nil, fmt.Errorf("typed_per_filter_config: %w", err)
	}
	for i, r := range vh.GetRoutes() {
		rt, err := route(r, vh.GetName(), filterName, f, firstSet(vhDisabled, rcDisabled))
		if err != nil {
			return nil, fmt.Errorf("routes[%d] (%s): %w", i, r.GetName(), err)
		}
		v.Routes = append(v.Routes, rt)
	}
	return v, nil
}

func firstSet(bs ...*bool) *bool {
	for _, b := range bs {
		if b != nil {
			return b
		}
	}
	return nil
}

func route(r *routev3.Route, vhost, filterName string, f *WasmFilter, outer *bool) (*Route, error) {
	rt := &Route{Name: r.GetName(), VirtualHost: vhost, Timeout: DefaultRouteTimeout}
	m := r.GetMatch()
	if len(m.GetQueryParameters()) > 0 || m.GetRuntimeFraction() != nil || m.GetGrpc() != nil ||
		m.GetTlsContext() != nil || len(m.GetDynamicMetadata()) > 0 || len(m.GetCookies()) > 0 ||
		len(m.GetFilterState()) > 0 {
		return nil, fmt.Errorf("match: only the path and headers conditions are supported")
	}
	rt.Match.CaseSensitive = m.GetCaseSensitive() == nil || m.GetCaseSensitive().GetValue()
	switch ps := m.GetPathSpecifier().(type) {
	case *routev3.RouteMatch_Prefix:
		rt.Match.Kind, rt.Match.Value = PathPrefix, ps.Prefix
	case *routev3.RouteMatch_Path:
		rt.Match.Kind, rt.Match.Value = PathExact, ps.Path
	case *routev3.RouteMatch_PathSeparatedPrefix:
		rt.Match.Kind, rt.Match.Value = PathSeparatedPrefix, ps.PathSeparatedPrefix
	case *routev3.RouteMatch_SafeRegex:
		re, err := fullRegexp(ps.SafeRegex.GetRegex())
		if err != nil {
			return nil, fmt.Errorf("match.safe_regex: %w", err)
		}
		rt.Match.Kind, rt.Match.Value, rt.Match.regex = PathRegex, ps.SafeRegex.GetRegex(), re
	default:
		return nil, fmt.Errorf("match: only prefix, path, path_separated_prefix and safe_regex are supported")
	}
	if !rt.Match.CaseSensitive && rt.Match.Kind != PathRegex {
		rt.Match.Value = strings.ToLower(rt.Match.Value)
	}
	for i, h := range m.GetHeaders() {
		hm, err := headerMatcher(h)
		if err != nil {
			return nil, fmt.Errorf("match.headers[%d] (%s): %w", i, h.GetName(), err)
		}
		rt.Match.Headers = append(rt.Match.Headers, hm)
	}
	switch a := r.GetAction().(type) {
	case *routev3.Route_Route:
		ra := a.Route
		cl, ok := ra.GetClusterSpecifier().(*routev3.RouteAction_Cluster)
		if !ok {
			return nil, fmt.Errorf("route: only a fixed cluster is supported (no cluster_header or weighted_clusters)")
		}
		if ra.GetPrefixRewrite() != "" || ra.GetRegexRewrite() != nil || ra.GetHostRewriteSpecifier() != nil {
			return nil, fmt.Errorf("route: path and host rewrites are not supported")
		}
		rt.Cluster = cl.Cluster
		if ra.GetTimeout() != nil {
			rt.Timeout = ra.GetTimeout().AsDuration()
		}
	case *routev3.Route_DirectResponse:
		body := a.DirectResponse.GetBody()
		var data []byte
		switch {
		case body == nil:
		case body.GetInlineString() != "":
			data = []byte(body.GetInlineString())
		case body.GetInlineBytes() != nil:
			data = body.GetInlineBytes()
		default:
			return nil, fmt.Errorf("direct_response.body: only inline_string and inline_bytes are supported")
		}
		rt.Direct = &DirectResponse{Status: int(a.DirectResponse.GetStatus()), Body: data}
	default:
		return nil, fmt.Errorf("only route and direct_response actions are supported")
	}
	if md := r.GetMetadata(); md != nil {
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(md)
		if err != nil {
			return nil, fmt.Errorf("metadata: %w", err)
		}
		rt.Metadata = b
	}
	own, err := perFilterDisabled(r.GetTypedPerFilterConfig(), filterName)
	if err != nil {
		return nil, fmt.Errorf("typed_per_filter_config: %w", err)
	}
	switch d := firstSet(own, outer); {
	case f == nil:
		rt.FilterDisabled = true
	case d != nil:
		rt.FilterDisabled = *d
	default:
		rt.FilterDisabled = f.DisabledByDefault
	}
	return rt, nil
}

func headerMatcher(h *routev3.HeaderMatcher) (HeaderMatcher, error) {
	hm := HeaderMatcher{
		Name:           strings.ToLower(h.GetName()),
		Invert:         h.GetInvertMatch(),
		MissingAsEmpty: h.GetTreatMissingHeaderAsEmpty(),
	}
	var err error
	switch s := h.GetHeaderMatchSpecifier().(type) {
	case *routev3.HeaderMatcher_StringMatch:
		sm := s.StringMatch
		hm.IgnoreCase = sm.GetIgnoreCase()
		switch {
		case sm.GetSafeRegex() != nil:
			// Envoy documents that ignore_case has no effect on safe_regex.
			hm.Kind, hm.Value, hm.IgnoreCase = "regex", sm.GetSafeRegex().GetRegex(), false
			hm.regex, err = fullRegexp(hm.Value)
		case sm.GetCustom() != nil:
			return hm, fmt.Errorf("string_match.custom is not supported")
		default:
			switch sm.GetMatchPattern().(type) {
			case *matcherv3.StringMatcher_Exact:
				hm.Kind, hm.Value = "exact", sm.GetExact()
			case *matcherv3.StringMatcher_Prefix:
				hm.Kind, hm.Value = "prefix", sm.GetPrefix()
			case *matcherv3.StringMatcher_Suffix:
				hm.Kind, hm.Value = "suffix", sm.GetSuffix()
			case *matcherv3.StringMatcher_Contains:
				hm.Kind, hm.Value = "contains", sm.GetContains()
			default:
				return hm, fmt.Errorf("string_match: no pattern")
			}
		}
	case *routev3.HeaderMatcher_PresentMatch:
		hm.Kind, hm.Present = "present", s.PresentMatch
	case *routev3.HeaderMatcher_ExactMatch:
		hm.Kind, hm.Value = "exact", s.ExactMatch
	case *routev3.HeaderMatcher_PrefixMatch:
		hm.Kind, hm.Value = "prefix", s.PrefixMatch
	case *routev3.HeaderMatcher_SuffixMatch:
		hm.Kind, hm.Value = "suffix", s.SuffixMatch
	case *routev3.HeaderMatcher_ContainsMatch:
		hm.Kind, hm.Value = "contains", s.ContainsMatch
	case *routev3.HeaderMatcher_SafeRegexMatch:
		hm.Kind, hm.Value = "regex", s.SafeRegexMatch.GetRegex()
		hm.regex, err = fullRegexp(hm.Value)
	case nil:
		// No specifier: Envoy treats it as present_match true.
		hm.Kind, hm.Present = "present", true
	default:
		return hm, fmt.Errorf("only string_match, present_match and the exact/prefix/suffix/contains/safe_regex forms are supported")
	}
	if err != nil {
		return hm, err
	}
	if hm.IgnoreCase && hm.Kind != "regex" {
		hm.Value = strings.ToLower(hm.Value)
	}
	return hm, nil
}

// fullRegexp compiles an RE2 pattern that must match the whole input, as Envoy's safe_regex
// does. Go's regexp package is RE2 too, so the syntax is the same.
func fullRegexp(expr string) (*regexp.Regexp, error) {
	return regexp.Compile(`^(?:` + expr + `)$`)
}

// Override points a cluster at another address ("host:port", or a URL whose host is used).
// Tests and the local runner use it to send "upstream" to a local echo server and "webdis"
// to a local webdis. Overriding an unknown cluster is an error, so that a typo does not leave
// the real one in place.
func (c *Config) Override(cluster, address string) error {
	cl := c.Clusters[cluster]
	if cl == nil {
		return fmt.Errorf("envoyconf: override: no cluster %q in the configuration", cluster)
	}
	if i := strings.Index(address, "://"); i >= 0 {
		address = strings.TrimSuffix(address[i+3:], "/")
		if j := strings.IndexByte(address, '/'); j >= 0 {
			address = address[:j]
		}
	}
	if _, _, err := net.SplitHostPort(address); err != nil {
		return fmt.Errorf("envoyconf: override %s: %w", cluster, err)
	}
	cl.Address = address
	return nil
}

// ClusterURLs maps every cluster with an address to its base URL ("http://host:port"), the
// form the wazero host's Options.Clusters takes.
func (c *Config) ClusterURLs() map[string]string {
	out := make(map[string]string, len(c.Clusters))
	for name, cl := range c.Clusters {
		if cl.Address != "" {
			out[name] = "http://" + cl.Address
		}
	}
	return out
}

// Listener returns the listener called name, or nil.
func (c *Config) Listener(name string) *Listener {
	for _, l := range c.Listeners {
		if l.Name == name {
			return l
		}
	}
	return nil
}

// Route returns the first route called name in any virtual host of the listener, or nil.
func (l *Listener) Route(name string) *Route {
	for _, vh := range l.VirtualHosts {
		for _, r := range vh.Routes {
			if r.Name == name {
				return r
			}
		}
	}
	return nil
}
