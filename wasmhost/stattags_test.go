package wasmhost

import (
	"regexp"
	"strings"
	"testing"
)

var testTags = []TagSpecifier{
	{Name: "rule", Regex: regexp.MustCompile(`(;rule=([^;]+))`)},
	{Name: "decision", Regex: regexp.MustCompile(`(;decision=([^;]+))`)},
}

// Tag extraction as Envoy does it: the first group leaves the name, the second is the value;
// without stats_tags the name stays flat and is sanitized.
func TestExtractTags(t *testing.T) {
	name, labels := extractTags("ratelimit_requests_total;rule=a.b-c;decision=denied", testTags)
	if name != "ratelimit_requests_total" || formatLabels(labels) != `{rule="a.b-c",decision="denied"}` {
		t.Fatalf("got %s%s", name, formatLabels(labels))
	}
	name, labels = extractTags("ratelimit_requests_total;rule=a;decision=denied", nil)
	if name != "ratelimit_requests_total_rule_a_decision_denied" || len(labels) != 0 {
		t.Fatalf("without tags: %s %v", name, labels)
	}
	// One capture group: it is both removed and the value.
	one := []TagSpecifier{{Name: "x", Regex: regexp.MustCompile(`\.(v\d)`)}, {Name: "env", FixedValue: "prod"}}
	name, labels = extractTags("api.v2.calls", one)
	if name != "api__calls" || formatLabels(labels) != `{x="v2",env="prod"}` {
		t.Fatalf("got %s%s", name, formatLabels(labels))
	}
}

// WritePrometheus groups the stats of every rule into one family per tag-extracted name,
// histograms included.
func TestWritePrometheusLabels(t *testing.T) {
	s := NewMetricStore()
	s.SetStatsTags(testTags)
	a, _ := s.m.define(MetricCounter, "ratelimit_requests_total;rule=a;decision=allowed")
	s.m.define(MetricCounter, "ratelimit_requests_total;rule=b;decision=denied")
	h, _ := s.m.define(MetricHistogram, "ratelimit_shape_delay_ms;rule=a")
	s.m.increment(a, 3)
	s.m.record(h, 7)
	var b strings.Builder
	if err := s.WritePrometheus(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"# TYPE ratelimit_requests_total counter\nratelimit_requests_total{rule=\"a\",decision=\"allowed\"} 3\nratelimit_requests_total{rule=\"b\",decision=\"denied\"} 0\n",
		"ratelimit_shape_delay_ms_bucket{rule=\"a\",le=\"10\"} 1\n",
		"ratelimit_shape_delay_ms_sum{rule=\"a\"} 7\nratelimit_shape_delay_ms_count{rule=\"a\"} 1\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
}
