package envoyconf

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// validationBootstrap is a valid bootstrap with what the validation tests break: a connection
// manager (an Any) holding routes, per-filter configurations and the Wasm filter (an Any in
// it), and a cluster with metadata and named endpoints.
const validationBootstrap = `static_resources:
  listeners:
  - name: l
    address: { socket_address: { address: 127.0.0.1, port_value: 8000 } }
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: t
          route_config:
            name: rc
            virtual_hosts:
            - name: api
              domains: ["*"]
              routes:
              - name: r
                match: { prefix: /api }
                route: { cluster: a, prefix_rewrite: /v1 }
                typed_per_filter_config:
                  envoy.filters.http.wasm:
                    "@type": type.googleapis.com/envoy.config.route.v3.FilterConfig
                    disabled: true
          http_filters:
          - name: envoy.filters.http.wasm
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm
              config:
                name: ratelimit
                root_id: ratelimit
                vm_config:
                  runtime: envoy.wasm.runtime.v8
                  code: { local: { filename: /etc/envoy/ratelimit.wasm } }
                configuration:
                  "@type": type.googleapis.com/google.protobuf.StringValue
                  value: '{"rules": []}'
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
  clusters:
  - name: a
    type: STATIC
    metadata: { filter_metadata: { tier: { level: gold } } }
    load_assignment:
      cluster_name: a
      endpoints:
      - lb_endpoints:
        - endpoint: { address: { socket_address: { address: 127.0.0.1, port_value: 8080 } } }
      named_endpoints:
        backup: { address: { socket_address: { address: 127.0.0.2, port_value: 8080 } } }
`

// Each violation of the API's rules is one error, at the path of the field in the YAML's own
// names and at the YAML line of the field (the line of the text "at").
func TestValidationErrorsNameTheYAMLField(t *testing.T) {
	_, err := ParseBootstrap([]byte(validationBootstrap))
	require.NoError(t, err)

	const hcm = "static_resources.listeners[0].filter_chains[0].filters[0].typed_config."
	const route = hcm + "route_config.virtual_hosts[0].routes[0]."
	const wasm = hcm + "http_filters[0].typed_config.config."
	type violation struct{ at, msg string }
	for _, tc := range []struct {
		name     string
		old, new string
		want     []violation
	}{
		{"empty string", "stat_prefix: t", `stat_prefix: ""`,
			[]violation{{`stat_prefix: ""`, hcm + "stat_prefix: value length must be at least 1 runes"}}},
		{"list element", "- name: envoy.filters.http.wasm", `- name: ""`,
			[]violation{{`- name: ""`, hcm + "http_filters[0].name: value length must be at least 1 runes"}}},
		{"oneof members", "route: { cluster: a, prefix_rewrite: /v1 }", `route: { cluster: "", prefix_rewrite: /v1 }`,
			[]violation{{`cluster: ""`, route + "route.cluster: value length must be at least 1 runes"}}},
		{"pattern", "route: { cluster: a, prefix_rewrite: /v1 }", `route: { cluster: a, prefix_rewrite: "/v1\n" }`,
			[]violation{{`"/v1\n"`, route + `route.prefix_rewrite: value does not match regex pattern "^[^\x00\n\r]*$"`}}},
		{"required oneof", "route: { cluster: a, prefix_rewrite: /v1 }", `route: { prefix_rewrite: /v1 }`,
			[]violation{{"route: { prefix_rewrite", route + "route.cluster_specifier: value is required (one of cluster, cluster_header, " +
				"weighted_clusters, cluster_specifier_plugin, inline_cluster_specifier_plugin)"}}},
		{"missing field, at its parent", "                route: { cluster: a, prefix_rewrite: /v1 }\n", "",
			[]violation{{"- name: r", route + "action: value is required " +
				"(one of route, redirect, direct_response, filter_action, non_forwarding_action)"}}},
		{"min_items", `domains: ["*"]`, `domains: []`,
			[]violation{{"domains: []", hcm + "route_config.virtual_hosts[0].domains: value must contain at least 1 item(s)"}}},
		{"map key", "filter_metadata: { tier:", `filter_metadata: { "":`,
			[]violation{{`{ "":`, `static_resources.clusters[0].metadata.filter_metadata[""]: value length must be at least 1 runes`}}},
		{"map value", "backup: { address: { socket_address: { address: 127.0.0.2, port_value: 8080 } } }",
			"backup: { address: { socket_address: { address: 127.0.0.2, port_value: 80800 } } }",
			[]violation{{"80800", `static_resources.clusters[0].load_assignment.named_endpoints["backup"].address.socket_address.port_value: ` +
				"value must be less than or equal to 65535"}}},
		{"typed_config inside typed_config", "filename: /etc/envoy/ratelimit.wasm", `filename: ""`,
			[]violation{{`filename: ""`, wasm + "vm_config.code.local.filename: value length must be at least 1 runes"}}},
		{"typed configuration in a map",
			"\"@type\": type.googleapis.com/envoy.config.route.v3.FilterConfig\n                    disabled: true",
			"\"@type\": type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm\n" +
				"                    config: { vm_config: { runtime: v8, code: { local: { filename: \"\" } } } }",
			[]violation{{"config: { vm_config", route + `typed_per_filter_config["envoy.filters.http.wasm"].config.vm_config.code.local.filename: ` +
				"value length must be at least 1 runes"}}},
		{"JSON names", "stat_prefix: t", `statPrefix: ""`,
			[]violation{{`statPrefix: ""`, hcm + "stat_prefix: value length must be at least 1 runes"}}},
		{"several, in the order of the file",
			// The validator reports the name first (the proto declares it first); the errors
			// come in the order of the file.
			"- name: api\n              domains: [\"*\"]", "- domains: []\n              name: \"\"",
			[]violation{
				{"domains: []", hcm + "route_config.virtual_hosts[0].domains: value must contain at least 1 item(s)"},
				{`name: ""`, hcm + "route_config.virtual_hosts[0].name: value length must be at least 1 runes"},
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Contains(t, validationBootstrap, tc.old, "the mutation no longer applies")
			bad := strings.Replace(validationBootstrap, tc.old, tc.new, 1)
			var want []string
			for _, v := range tc.want {
				require.Contains(t, bad, v.at)
				line := strings.Count(bad[:strings.Index(bad, v.at)], "\n") + 1
				want = append(want, fmt.Sprintf("YAML line %d: %s", line, v.msg))
			}
			_, err := ParseBootstrap([]byte(bad))
			require.Error(t, err)
			var got []string
			for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
				var fe *FieldError
				require.True(t, errors.As(e, &fe), "%T: %v", e, e)
				got = append(got, strings.TrimPrefix(e.Error(), "envoyconf: "))
			}
			require.Equal(t, want, got, "%s", bad)
		})
	}
}

// Validate alone (no YAML) gives the same paths, from the message it is given, without
// lines, in the validator's order.
func TestValidateWithoutYAML(t *testing.T) {
	err := Validate(&hcmv3.HttpConnectionManager{HttpFilters: []*hcmv3.HttpFilter{{Name: ""}}})
	require.EqualError(t, err, "envoyconf: stat_prefix: value length must be at least 1 runes\n"+
		"envoyconf: http_filters[0].name: value length must be at least 1 runes\n"+
		"envoyconf: route_specifier: value is required (one of rds, route_config, scoped_routes)")
}

// unknownFieldError is a violation naming a field its message does not have, which the
// generated validators do not produce: it stands for a validator this package cannot read.
type unknownFieldError struct{}

func (unknownFieldError) Error() string  { return "invalid HttpConnectionManager.NoSuchField: broken" }
func (unknownFieldError) Field() string  { return "NoSuchField" }
func (unknownFieldError) Reason() string { return "broken" }
func (unknownFieldError) Cause() error   { return nil }

// A violation whose field cannot be found keeps the validator's own text, after the path of
// the message it was found in and that message's type, rather than a guessed path.
func TestUntranslatableViolation(t *testing.T) {
	m := &hcmv3.HttpConnectionManager{StatPrefix: "t"}
	var errs []*FieldError
	translate(m.ProtoReflect(), "static_resources.listeners[0].filter_chains[0].filters[0].typed_config", unknownFieldError{}, &errs)
	require.Len(t, errs, 1)
	require.Equal(t, "envoyconf: static_resources.listeners[0].filter_chains[0].filters[0].typed_config "+
		"(envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager): "+
		"invalid HttpConnectionManager.NoSuchField: broken", errs[0].Error())

	// A list index that is no number, and an index on a field that is not a list, likewise.
	for _, field := range []string{"HttpFilters[x]", "StatPrefix[0]"} {
		errs = nil
		translate(m.ProtoReflect(), "", fieldNamed(field), &errs)
		require.Len(t, errs, 1)
		require.Equal(t, "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager", errs[0].Type, field)
	}
}

// fieldNamed is a violation at a given Go field name.
type fieldNamed string

func (f fieldNamed) Error() string { return "invalid " + string(f) }
func (f fieldNamed) Field() string { return string(f) }
func (fieldNamed) Reason() string  { return "broken" }
func (fieldNamed) Cause() error    { return nil }

func TestYAMLLine(t *testing.T) {
	doc := "a:\n  bC:\n  - x: 1\n  - &y\n    x: 2\n  d: { \"k]\": 3 }\ne:\n  <<: *y\n"
	var n yaml.Node
	require.NoError(t, yaml.Unmarshal([]byte(doc), &n))
	for path, want := range map[string]int{
		"a":           1,
		"a.b_c":       2, // the file writes the JSON name
		"a.b_c[0].x":  3,
		"a.b_c[1].x":  5,
		"a.b_c[1]":    4,
		"a.b_c[7].x":  2, // no such element: its list
		"a.d[\"k]\"]": 6,
		"e.x":         5, // merged from the anchor: where the anchored mapping writes it
		"z":           0,
	} {
		require.Equal(t, want, yamlLine(&n, path), path)
	}
}
