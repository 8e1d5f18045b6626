// Package effective writes a filter configuration as its effective configuration: every
// default filled in and every per-rule value resolved, in the configuration's own schema, so
// that an operator sees what the filter enforces rather than what was typed. config.Parse
// reads it back to an equivalent configuration. The wazero host's /config_dump serves it and
// `check -effective` prints it; the filter itself does not carry the writer.
package effective

import (
	"encoding/json"
	"time"

	"github.com/ratelimit-wasm/ratelimit/algorithms"
	"github.com/ratelimit-wasm/ratelimit/filter/config"
)

// JSON returns c's effective configuration.
func JSON(c *config.Config) ([]byte, error) { return json.Marshal(encode(c)) }

type jsonConfig struct {
	Domain           string     `json:"domain"`
	FailureMode      string     `json:"failure_mode"`
	CASAttempts      int        `json:"cas_attempts"`
	RateLimitHeaders string     `json:"rate_limit_headers"`
	TrustedHops      int        `json:"trusted_hops"`
	Deny             *jsonDeny  `json:"deny"`
	MaxKeys          int        `json:"max_keys"`
	MaxKeyBytes      int        `json:"max_key_bytes"`
	Redis            *jsonRedis `json:"redis,omitempty"`
	Rules            []jsonRule `json:"rules"`
	FilterState      bool       `json:"filter_state,omitempty"`
}

type jsonDeny struct {
	Status      int               `json:"status"`
	Body        string            `json:"body"`
	ContentType string            `json:"content_type"`
	Headers     map[string]string `json:"headers"`
	// EnvoyRateLimited and GrpcStatus are always written: they are defaults worth seeing.
	EnvoyRateLimited bool `json:"envoy_ratelimited_header"`
	GrpcStatus       int  `json:"grpc_status"`
}

type jsonRedis struct {
	Cluster     string `json:"cluster"`
	Authority   string `json:"authority,omitempty"` // omitted when it is the cluster name
	Timeout     string `json:"timeout"`
	KeyPrefix   string `json:"key_prefix"`
	Partitions  int    `json:"partitions"`
	FailureMode string `json:"failure_mode"`
	Breaker     struct {
		Failures int    `json:"failures"`
		Cooldown string `json:"cooldown"`
	} `json:"breaker"`
}

type jsonRule struct {
	Name        string        `json:"name"`
	Description string        `json:"description,omitempty"`
	Match       *jsonMatch    `json:"match,omitempty"`
	Key         []jsonKeyPart `json:"key"`
	Algorithm   string        `json:"algorithm"`
	Limit       int64         `json:"limit"`
	Window      string        `json:"window"`
	Burst       int64         `json:"burst,omitempty"`
	Variant     string        `json:"variant,omitempty"`
	Mode        string        `json:"mode"`
	MaxDelay    string        `json:"max_delay,omitempty"`
	Adaptive    *jsonAdaptive `json:"adaptive,omitempty"`
	Cost        any           `json:"cost"`
	Shadow      bool          `json:"shadow"`
	// The shadow-only fields are omitted when unset: Parse refuses them on enforced rules.
	ShadowHeaders       bool           `json:"shadow_headers,omitempty"`
	ShadowRequestHeader string         `json:"shadow_request_header,omitempty"`
	Overrides           []jsonOverride `json:"overrides,omitempty"`
	Continue            bool           `json:"continue"`
	Scope               string         `json:"scope"`
	MaxKeys             int            `json:"max_keys"`
	Deny                *jsonDeny      `json:"deny"`
	RateLimitHeaders    string         `json:"rate_limit_headers"`
	Lease               *jsonLease     `json:"lease,omitempty"`
	// EnforcePercent and NearLimitRatio are written when they are not the defaults (100 and
	// 0.8). The top level's values, which only give the rules their defaults, are not written:
	// every rule carries its effective value, which reads back the same.
	EnforcePercent *float64 `json:"enforce_percent,omitempty"`
	NearLimitRatio *float64 `json:"near_limit_ratio,omitempty"`
}

type jsonLease struct {
	Batch int64  `json:"batch"`
	TTL   string `json:"ttl"`
}

type jsonOverride struct {
	Part      int     `json:"part"`
	Exact     *string `json:"exact,omitempty"`
	Prefix    *string `json:"prefix,omitempty"`
	Unlimited bool    `json:"unlimited,omitempty"`
	Limit     int64   `json:"limit,omitempty"`
	Window    string  `json:"window,omitempty"`
	Burst     int64   `json:"burst,omitempty"`
}

type jsonMatch struct {
	Routes       []string          `json:"routes,omitempty"`
	VirtualHosts []string          `json:"virtual_hosts,omitempty"`
	Path         map[string]string `json:"path,omitempty"`
	Methods      []string          `json:"methods,omitempty"`
	Headers      []map[string]any  `json:"headers,omitempty"`
}

type jsonKeyPart struct {
	Source     string  `json:"source"`
	Name       string  `json:"name,omitempty"`
	Value      *string `json:"value,omitempty"`
	Default    *string `json:"default,omitempty"`
	IPv4Prefix int     `json:"ipv4_prefix,omitempty"`
	IPv6Prefix int     `json:"ipv6_prefix,omitempty"`
	// OnDuplicate is written for header and query parts only, where it always has a value.
	OnDuplicate string `json:"on_duplicate,omitempty"`
}

type jsonAdaptive struct {
	MinLimit       int64   `json:"min_limit"`
	MaxLimit       int64   `json:"max_limit"`
	TargetLatency  string  `json:"target_latency,omitempty"`
	ErrorThreshold float64 `json:"error_threshold"`
	Interval       string  `json:"interval"`
}

// encode builds the structs that describe the effective configuration.
func encode(c *config.Config) jsonConfig {
	jc := jsonConfig{
		Domain:           c.Domain,
		FailureMode:      string(c.FailureMode),
		CASAttempts:      c.CASAttempts,
		RateLimitHeaders: string(c.RateLimitHeaders),
		TrustedHops:      c.TrustedHops,
		Deny:             encodeDeny(c.Deny),
		MaxKeys:          c.MaxKeys,
		MaxKeyBytes:      c.MaxKeyBytes,
		Rules:            make([]jsonRule, 0, len(c.Rules)),
		FilterState:      c.FilterState,
	}
	if r := c.Redis; r != nil {
		jr := &jsonRedis{
			Cluster:     r.Cluster,
			Timeout:     duration(r.Timeout),
			KeyPrefix:   r.KeyPrefix,
			Partitions:  r.Partitions,
			FailureMode: string(r.FailureMode),
		}
		if r.Authority != r.Cluster {
			// Written only when it differs, because the default (the cluster name) is not
			// held to the authority syntax: Envoy cluster names may contain "/".
			jr.Authority = r.Authority
		}
		jr.Breaker.Failures = r.Breaker.Failures
		jr.Breaker.Cooldown = duration(r.Breaker.Cooldown)
		jc.Redis = jr
	}
	for _, r := range c.Rules {
		jc.Rules = append(jc.Rules, encodeRule(r))
	}
	return jc
}

func encodeDeny(d *config.Deny) *jsonDeny {
	jd := &jsonDeny{Status: d.Status, Body: d.Body, ContentType: d.ContentType,
		EnvoyRateLimited: d.EnvoyRateLimited, GrpcStatus: d.GrpcStatus}
	// An empty map, not an absent one, so that a rule whose override removed the
	// top-level headers still removes them when read back.
	jd.Headers = make(map[string]string, len(d.Headers))
	for _, h := range d.Headers {
		jd.Headers[h.Name] = h.Value
	}
	return jd
}

func encodeRule(r *config.Rule) jsonRule {
	jr := jsonRule{
		Name:                r.Name,
		Description:         r.Description,
		Key:                 make([]jsonKeyPart, 0, len(r.Key)),
		Algorithm:           r.Algorithm.Algorithm,
		Limit:               r.Algorithm.Limit,
		Window:              duration(r.Algorithm.Window),
		Burst:               r.Algorithm.Burst,
		Variant:             r.Algorithm.Variant,
		Mode:                string(r.Mode),
		Shadow:              r.Shadow,
		ShadowHeaders:       r.ShadowHeaders,
		ShadowRequestHeader: r.ShadowRequestHeader,
		Continue:            r.Continue,
		Scope:               string(r.Scope),
		MaxKeys:             r.MaxKeys,
		Deny:                encodeDeny(r.Deny),
		RateLimitHeaders:    string(r.RateLimitHeaders),
	}
	for _, o := range r.Overrides {
		v := o.Value
		jo := jsonOverride{Part: o.Part, Unlimited: o.Unlimited}
		if o.Prefix {
			jo.Prefix = &v
		} else {
			jo.Exact = &v
		}
		if !o.Unlimited {
			jo.Limit, jo.Window, jo.Burst = o.Algorithm.Limit, duration(o.Algorithm.Window), o.Algorithm.Burst
		}
		jr.Overrides = append(jr.Overrides, jo)
	}
	if l := r.Lease; l != nil {
		jr.Lease = &jsonLease{Batch: l.Batch, TTL: duration(l.TTL)}
	}
	if v := r.EnforcePercent; v != 100 && !r.Shadow {
		jr.EnforcePercent = &v
	}
	if v := r.NearLimitRatio; v != config.DefaultNearLimitRatio {
		jr.NearLimitRatio = &v
	}
	if a := r.Algorithm; a.MaxDelay > 0 {
		jr.MaxDelay = duration(a.MaxDelay)
	}
	if a := r.Algorithm; a.Algorithm == algorithms.AlgAdaptive {
		jr.Adaptive = &jsonAdaptive{
			MinLimit:       a.MinLimit,
			MaxLimit:       a.MaxLimit,
			TargetLatency:  duration(a.TargetLatency),
			ErrorThreshold: a.ErrorThreshold,
			Interval:       duration(a.AdjustInterval),
		}
		if a.TargetLatency == 0 {
			jr.Adaptive.TargetLatency = "" // absent: the latency signal is off
		}
	}
	jr.Cost = encodeCost(r.CostSpec)
	for _, kp := range r.Key {
		jk := jsonKeyPart{Source: string(kp.Source), Name: kp.Name}
		if kp.Source == config.SourceConst {
			v := kp.Value
			jk.Value = &v
		}
		if kp.HasDefault {
			d := kp.Default
			jk.Default = &d
		}
		if kp.Source == config.SourceClientIP {
			jk.IPv4Prefix, jk.IPv6Prefix = kp.IPv4Prefix, kp.IPv6Prefix
		}
		if kp.Source == config.SourceHeader || kp.Source == config.SourceQuery {
			jk.OnDuplicate = string(kp.OnDuplicate)
		}
		jr.Key = append(jr.Key, jk)
	}
	m := &r.Match
	if len(m.Routes)+len(m.VirtualHosts)+len(m.Methods)+len(m.Headers) > 0 || m.Path != nil {
		jm := &jsonMatch{Routes: m.Routes, VirtualHosts: m.VirtualHosts, Methods: m.Methods}
		if pm := m.Path; pm != nil {
			jm.Path = map[string]string{matchKindName(pm.Kind): pm.Value}
		}
		for _, hm := range m.Headers {
			h := map[string]any{"name": hm.Name}
			switch hm.Kind {
			case config.MatchPresent:
				h["present"] = true
			case config.MatchAbsent:
				h["present"] = false
			default:
				h[matchKindName(hm.Kind)] = hm.Value
			}
			if hm.Invert {
				h["invert"] = true
			}
			jm.Headers = append(jm.Headers, h)
		}
		jr.Match = jm
	}
	return jr
}

func matchKindName(k config.StringMatchKind) string {
	switch k {
	case config.MatchExact:
		return "exact"
	case config.MatchPrefix:
		return "prefix"
	case config.MatchRegex:
		return "regex"
	}
	return ""
}

// The members of a cost object are declared in key order, as the schema lists them.
type (
	jsonHeaderCost struct {
		Default int64  `json:"default"`
		Header  string `json:"header"`
		Max     int64  `json:"max"`
	}
	jsonUsageCost struct {
		Max       int64     `json:"max"`
		OnMissing string    `json:"on_missing"`
		Reserve   any       `json:"reserve"`
		Usage     jsonUsage `json:"usage"`
	}
	jsonUsage struct {
		Header string   `json:"header,omitempty"`
		JSON   []string `json:"json,omitempty"`
	}
)

// encodeCost returns a rule's cost: a constant, a header's value, or a reservation settled by
// the usage the response reports.
func encodeCost(cs config.CostSpec) any {
	var reserve any = cs.Constant
	if cs.Header != "" {
		reserve = jsonHeaderCost{Default: cs.Default, Header: cs.Header, Max: cs.Max}
	}
	u := cs.Usage
	if u == nil {
		return reserve
	}
	return jsonUsageCost{Max: u.Max, OnMissing: u.OnMissing, Reserve: reserve,
		Usage: jsonUsage{Header: u.Header, JSON: u.Texts}}
}

func duration(d time.Duration) string { return d.String() }
