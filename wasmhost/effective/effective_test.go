package effective

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ratelimit-wasm/ratelimit/filter/config"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"
)

const configDir = "../../filter/config/"

// seeds are the configurations the effective configuration is checked on: every example,
// and configurations of the fields whose defaults or forms the examples leave out.
func seeds(tb testing.TB) [][]byte {
	files, _ := filepath.Glob(configDir + "testdata/examples/*.json")
	require.NotEmpty(tb, files)
	var out [][]byte
	for _, file := range files {
		data, err := os.ReadFile(file)
		require.NoError(tb, err)
		out = append(out, data)
	}
	const tb1 = `"algorithm":"token_bucket","limit":10,"window":"1s"`
	for _, s := range []string{
		`{"redis":{"cluster":"outbound|7379||webdis/x"},"rules":[{"name":"r",` + tb1 + `,"scope":"global"}]}`,
		`{"enforce_percent":25,"near_limit_ratio":0.5,"filter_state":true,"rules":[
			{"name":"inherits","continue":true,` + tb1 + `},
			{"name":"own","continue":true,"enforce_percent":12.34567,"near_limit_ratio":0.9,` + tb1 + `},
			{"name":"dry","continue":true,"shadow":true,` + tb1 + `},
			{"name":"tells","enforce_percent":0,"shadow_request_header":"x-unenforced",` + tb1 + `}]}`,
		`{"rules":[{"name":"a",` + tb1 + `,"lease":{"batch":10}},{"name":"b",` + tb1 + `,"lease":{"batch":5,"ttl":"250ms"}}]}`,
		`{"rules":[{"name":"llm",` + tb1 + `,"cost":{"reserve":{"header":"x-max-tokens","default":1,"max":3},
			"usage":{"json":["/usage/input_tokens","/a~1b~0c"]},"max":10,"on_missing":"max"}}]}`,
		`{"rules":[{"name":"u",` + tb1 + `,"cost":{"reserve":4,"usage":{"header":"X-Usage-Tokens"},"max":10}}]}`,
		`{"deny":{"body":"<b>&amp;</b> \u2028 \u0001\"\\ é","headers":{"x-b":"2","x-a":"<1>"}},
			"rules":[{"name":"r","description":"a\u007fb","key":[{"source":"header","name":"x-k","default":"\u0000"}],
			"match":{"headers":[{"name":"x","exact":"<>"},{"name":"y","present":false,"invert":true}],"path":{"prefix":"/a&b"}},
			"cost":{"header":"x-cost","default":2,"max":9},` + tb1 + `}]}`,
	} {
		out = append(out, []byte(s))
	}
	return out
}

func compileSchema(tb testing.TB) *jsonschema.Schema {
	f, err := os.Open(configDir + "schema.json")
	require.NoError(tb, err)
	defer f.Close()
	doc, err := jsonschema.UnmarshalJSON(f)
	require.NoError(tb, err)
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	require.NoError(tb, c.AddResource("schema.json", doc))
	s, err := c.Compile("schema.json")
	require.NoError(tb, err)
	return s
}

// checkRoundTrip checks that the effective configuration of an accepted configuration is
// valid against the schema, that Parse accepts it, and that it is a fixed point.
func checkRoundTrip(t *testing.T, schema *jsonschema.Schema, data []byte) {
	c, err := config.Parse(data)
	if err != nil {
		return
	}
	out1, err := JSON(c)
	require.NoError(t, err)
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(out1))
	require.NoError(t, err)
	require.NoError(t, schema.Validate(inst), "schema rejects the effective configuration:\n%s", out1)
	c2, err := config.Parse(out1)
	require.NoError(t, err, "the effective configuration does not parse:\n%s\ninput: %s", out1, data)
	out2, err := JSON(c2)
	require.NoError(t, err)
	require.Equal(t, string(out1), string(out2), "not a fixed point")
}

func TestRoundTrip(t *testing.T) {
	schema := compileSchema(t)
	for _, s := range seeds(t) {
		_, err := config.Parse(s)
		require.NoError(t, err, "%s", s)
		checkRoundTrip(t, schema, s)
	}
}

// FuzzRoundTrip checks the round trip for whatever configuration Parse accepts.
func FuzzRoundTrip(f *testing.F) {
	for _, s := range seeds(f) {
		f.Add(s)
	}
	schema := compileSchema(f)
	f.Fuzz(func(t *testing.T, data []byte) { checkRoundTrip(t, schema, data) })
}

// TestValues checks what the effective configuration holds beyond the round trip: the
// defaults an operator did not type, and the values that are left out when they are defaults.
func TestValues(t *testing.T) {
	effective := func(s string) string {
		c, err := config.Parse([]byte(s))
		require.NoError(t, err)
		out, err := JSON(c)
		require.NoError(t, err)
		return string(out)
	}
	s := seeds(t)
	n := len(s) - 6
	one := effective(`{"rules":[{"name":"r","algorithm":"token_bucket","limit":5,"window":"1s"}]}`)
	for _, want := range []string{`"domain":"rl"`, `"failure_mode":"allow"`, `"cas_attempts":8`, `"scope":"local"`} {
		require.Contains(t, one, want)
	}
	for _, absent := range []string{"enforce_percent", "near_limit_ratio", "filter_state", "lease", "authority"} {
		require.NotContains(t, one, absent)
	}
	require.NotContains(t, effective(string(s[n])), "authority", "the default authority is the cluster name")
	enforce := effective(string(s[n+1]))
	require.Contains(t, enforce, `"filter_state":true`)
	require.Contains(t, enforce, `"enforce_percent":25,"near_limit_ratio":0.5`)
	require.Contains(t, enforce, `"enforce_percent":12.34567,"near_limit_ratio":0.9`)
	lease := effective(string(s[n+2]))
	require.Contains(t, lease, `"lease":{"batch":5,"ttl":"250ms"}`)
	require.Equal(t, 2, strings.Count(lease, `"lease"`))
	require.Contains(t, effective(string(s[n+3])),
		`"cost":{"max":10,"on_missing":"max","reserve":{"default":1,"header":"x-max-tokens","max":3},"usage":{"json":["/usage/input_tokens","/a~1b~0c"]}}`)
}
