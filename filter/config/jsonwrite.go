package config

import (
	"sort"
	"strconv"

	"github.com/go-json-experiment/json/jsontext"
)

// This file writes the effective configuration's JSON (encode.go) with jsontext's string
// quoting and number formatting, not with encoding/json's reflection: encoding/json would
// link reflect and fmt into the module. Each struct writes its members in declaration order
// with the same omitempty rules as its struct tags, and maps are written in key order, as
// encoding/json writes them. The struct tags stay: the test marshals the same structs with
// encoding/json and checks that both write the same values in the same order.

// rawJSON is a member whose JSON is already written (a rule's cost).
type rawJSON []byte

// MarshalJSON returns r itself, so that encoding/json writes it as json.RawMessage would.
func (r rawJSON) MarshalJSON() ([]byte, error) { return r, nil }

// jsonWriter appends an object's members, writing the comma between them.
type jsonWriter struct {
	b     []byte
	first bool
}

func beginObject(b []byte) jsonWriter { return jsonWriter{b: append(b, '{'), first: true} }

func (w *jsonWriter) end() []byte { return append(w.b, '}') }

// key writes a member's name; the names are plain ASCII, written as they are. It is not
// inlined: its appends, copied into each of the writer's hundred-odd call sites, made the
// writer's functions about twice their size in the module, and the configuration is
// written rarely (after each configure), so the call costs nothing that matters.
//
//go:noinline
func (w *jsonWriter) key(name string) {
	if !w.first {
		w.b = append(w.b, ',')
	}
	w.first = false
	w.b = append(w.b, '"')
	w.b = append(w.b, name...)
	w.b = append(w.b, '"', ':')
}

func (w *jsonWriter) str(name, v string) { w.key(name); w.b = appendJSONString(w.b, v) }

func (w *jsonWriter) strOmit(name, v string) {
	if v != "" {
		w.str(name, v)
	}
}

func (w *jsonWriter) int(name string, v int64) { w.key(name); w.b = strconv.AppendInt(w.b, v, 10) }

func (w *jsonWriter) intOmit(name string, v int64) {
	if v != 0 {
		w.int(name, v)
	}
}

func (w *jsonWriter) bool(name string, v bool) { w.key(name); w.b = strconv.AppendBool(w.b, v) }

func (w *jsonWriter) boolOmit(name string, v bool) {
	if v {
		w.bool(name, v)
	}
}

func (w *jsonWriter) floatPtrOmit(name string, v *float64) {
	if v != nil {
		w.key(name)
		w.b = jsontext.AppendFloat(w.b, *v, 64)
	}
}

func (w *jsonWriter) strPtrOmit(name string, v *string) {
	if v != nil {
		w.str(name, *v)
	}
}

// strings writes a string array; nil is null, as encoding/json writes a nil slice.
func (w *jsonWriter) strings(name string, v []string) {
	w.key(name)
	w.b = appendStrings(w.b, v)
}

func (w *jsonWriter) stringsOmit(name string, v []string) {
	if len(v) > 0 {
		w.strings(name, v)
	}
}

func appendStrings(b []byte, v []string) []byte {
	return appendArray(b, v, func(s *string, b []byte) []byte { return appendJSONString(b, *s) })
}

// appendArray writes v as a JSON array, each element by elem (a method expression such as
// (*jsonRule).appendJSON fits); nil is null, as encoding/json writes a nil slice.
func appendArray[T any](b []byte, v []T, elem func(x *T, b []byte) []byte) []byte {
	if v == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i := range v {
		if i > 0 {
			b = append(b, ',')
		}
		b = elem(&v[i], b)
	}
	return append(b, ']')
}

// appendStringMap writes a map of strings in key order; nil is null.
func appendStringMap(b []byte, m map[string]string) []byte {
	if m == nil {
		return append(b, "null"...)
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Sort(sort.StringSlice(keys))
	w := beginObject(b)
	for _, k := range keys {
		if !w.first {
			w.b = append(w.b, ',')
		}
		w.first = false
		w.b = appendJSONString(w.b, k)
		w.b = append(w.b, ':')
		w.b = appendJSONString(w.b, m[k])
	}
	return w.end()
}

// appendAnyMap writes a header matcher's map in key order; its values are strings and
// booleans only (encodeRule builds it).
func appendAnyMap(b []byte, m map[string]any) []byte {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Sort(sort.StringSlice(keys))
	w := beginObject(b)
	for _, k := range keys {
		if !w.first {
			w.b = append(w.b, ',')
		}
		w.first = false
		w.b = appendJSONString(w.b, k)
		w.b = append(w.b, ':')
		switch v := m[k].(type) {
		case string:
			w.b = appendJSONString(w.b, v)
		case bool:
			w.b = strconv.AppendBool(w.b, v)
		default:
			w.b = append(w.b, "null"...)
		}
	}
	return w.end()
}

// appendJSONString writes s as a JSON string with jsontext's minimal escaping (RFC 8785):
// quotes, backslashes and control characters escaped, everything else as it is. Invalid
// UTF-8 is written as U+FFFD, as Parse reads it; jsontext reports it with an error that is of
// no use here.
func appendJSONString(b []byte, s string) []byte {
	b, _ = jsontext.AppendQuote(b, s)
	return b
}

func (jc *jsonConfig) appendJSON(b []byte) []byte {
	w := beginObject(b)
	w.str("domain", jc.Domain)
	w.str("failure_mode", jc.FailureMode)
	w.int("cas_attempts", int64(jc.CASAttempts))
	w.str("rate_limit_headers", jc.RateLimitHeaders)
	w.int("trusted_hops", int64(jc.TrustedHops))
	w.key("deny")
	w.b = jc.Deny.appendJSON(w.b)
	w.int("max_keys", int64(jc.MaxKeys))
	w.int("max_key_bytes", int64(jc.MaxKeyBytes))
	if jc.Redis != nil {
		w.key("redis")
		w.b = jc.Redis.appendJSON(w.b)
	}
	w.key("rules")
	w.b = appendArray(w.b, jc.Rules, (*jsonRule).appendJSON)
	w.boolOmit("filter_state", jc.FilterState)
	return w.end()
}

func (d *jsonDeny) appendJSON(b []byte) []byte {
	if d == nil {
		return append(b, "null"...)
	}
	w := beginObject(b)
	w.int("status", int64(d.Status))
	w.str("body", d.Body)
	w.str("content_type", d.ContentType)
	w.key("headers")
	w.b = appendStringMap(w.b, d.Headers)
	w.bool("envoy_ratelimited_header", d.EnvoyRateLimited)
	w.int("grpc_status", int64(d.GrpcStatus))
	return w.end()
}

func (r *jsonRedis) appendJSON(b []byte) []byte {
	w := beginObject(b)
	w.str("cluster", r.Cluster)
	w.strOmit("authority", r.Authority)
	w.str("timeout", r.Timeout)
	w.str("key_prefix", r.KeyPrefix)
	w.int("partitions", int64(r.Partitions))
	w.str("failure_mode", r.FailureMode)
	w.key("breaker")
	bw := beginObject(w.b)
	bw.int("failures", int64(r.Breaker.Failures))
	bw.str("cooldown", r.Breaker.Cooldown)
	w.b = bw.end()
	return w.end()
}

func (r *jsonRule) appendJSON(b []byte) []byte {
	w := beginObject(b)
	w.str("name", r.Name)
	w.strOmit("description", r.Description)
	if r.Match != nil {
		w.key("match")
		w.b = r.Match.appendJSON(w.b)
	}
	w.key("key")
	w.b = appendArray(w.b, r.Key, (*jsonKeyPart).appendJSON)
	w.str("algorithm", r.Algorithm)
	w.int("limit", r.Limit)
	w.str("window", r.Window)
	w.intOmit("burst", r.Burst)
	w.strOmit("variant", r.Variant)
	w.str("mode", r.Mode)
	w.strOmit("max_delay", r.MaxDelay)
	if r.Adaptive != nil {
		w.key("adaptive")
		w.b = r.Adaptive.appendJSON(w.b)
	}
	w.key("cost")
	if r.Cost == nil {
		w.b = append(w.b, "null"...)
	} else {
		w.b = append(w.b, r.Cost...)
	}
	w.bool("shadow", r.Shadow)
	w.boolOmit("shadow_headers", r.ShadowHeaders)
	w.strOmit("shadow_request_header", r.ShadowRequestHeader)
	if len(r.Overrides) > 0 {
		w.key("overrides")
		w.b = appendArray(w.b, r.Overrides, (*jsonOverride).appendJSON)
	}
	w.bool("continue", r.Continue)
	w.str("scope", r.Scope)
	w.int("max_keys", int64(r.MaxKeys))
	w.key("deny")
	w.b = r.Deny.appendJSON(w.b)
	w.str("rate_limit_headers", r.RateLimitHeaders)
	if r.Lease != nil {
		w.key("lease")
		lw := beginObject(w.b)
		lw.int("batch", r.Lease.Batch)
		lw.str("ttl", r.Lease.TTL)
		w.b = lw.end()
	}
	w.floatPtrOmit("enforce_percent", r.EnforcePercent)
	w.floatPtrOmit("near_limit_ratio", r.NearLimitRatio)
	return w.end()
}

func (o *jsonOverride) appendJSON(b []byte) []byte {
	w := beginObject(b)
	w.int("part", int64(o.Part))
	w.strPtrOmit("exact", o.Exact)
	w.strPtrOmit("prefix", o.Prefix)
	w.boolOmit("unlimited", o.Unlimited)
	w.intOmit("limit", o.Limit)
	w.strOmit("window", o.Window)
	w.intOmit("burst", o.Burst)
	return w.end()
}

func (m *jsonMatch) appendJSON(b []byte) []byte {
	w := beginObject(b)
	w.stringsOmit("routes", m.Routes)
	w.stringsOmit("virtual_hosts", m.VirtualHosts)
	if len(m.Path) > 0 {
		w.key("path")
		w.b = appendStringMap(w.b, m.Path)
	}
	w.stringsOmit("methods", m.Methods)
	if len(m.Headers) > 0 {
		w.key("headers")
		w.b = appendArray(w.b, m.Headers, func(h *map[string]any, b []byte) []byte {
			if *h == nil {
				return append(b, "null"...)
			}
			return appendAnyMap(b, *h)
		})
	}
	return w.end()
}

func (k *jsonKeyPart) appendJSON(b []byte) []byte {
	w := beginObject(b)
	w.str("source", k.Source)
	w.strOmit("name", k.Name)
	w.strPtrOmit("value", k.Value)
	w.strPtrOmit("default", k.Default)
	w.intOmit("ipv4_prefix", int64(k.IPv4Prefix))
	w.intOmit("ipv6_prefix", int64(k.IPv6Prefix))
	w.strOmit("on_duplicate", k.OnDuplicate)
	return w.end()
}

func (a *jsonAdaptive) appendJSON(b []byte) []byte {
	w := beginObject(b)
	w.int("min_limit", a.MinLimit)
	w.int("max_limit", a.MaxLimit)
	w.strOmit("target_latency", a.TargetLatency)
	w.key("error_threshold")
	w.b = jsontext.AppendFloat(w.b, a.ErrorThreshold, 64)
	w.str("interval", a.Interval)
	return w.end()
}
