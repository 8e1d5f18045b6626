package config

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/ratelimit-wasm/ratelimit/algorithms"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"
)

const schemaID = "https://github.com/ratelimit-wasm/ratelimit/filter/config/schema.json"

func compileSchema(t testing.TB) *jsonschema.Schema {
	t.Helper()
	f, err := os.Open("schema.json")
	require.NoError(t, err)
	defer f.Close()
	doc, err := jsonschema.UnmarshalJSON(f)
	require.NoError(t, err, "schema.json is not JSON")
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	// Compiling checks schema.json against the draft 2020-12 meta-schema.
	require.NoError(t, c.AddResource(schemaID, doc))
	s, err := c.Compile(schemaID)
	require.NoError(t, err, "schema.json does not compile")
	return s
}

func validate(s *jsonschema.Schema, data string) error {
	inst, err := jsonschema.UnmarshalJSON(strings.NewReader(data))
	if err != nil {
		return err
	}
	return s.Validate(inst)
}

// TestExamples checks that every example is valid against the schema and accepted by
// Parse: the two must never disagree on a config we ship.
func TestExamples(t *testing.T) {
	s := compileSchema(t)
	files, err := filepath.Glob("testdata/examples/*.json")
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(files), 7, "examples")
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			require.NoError(t, err)
			require.NoError(t, validate(s, string(data)), "schema rejects it")
			_, err = Parse(data)
			require.NoError(t, err, "Parse rejects it")
		})
	}
}

// TestSchemaRejectsInvalid runs the invalid-config table through the schema. Where the
// schema can express a rule it must reject the config; where only Parse can check it (a
// regex's syntax, arithmetic across fields), the case is marked and the schema is expected
// to accept, so that a schema change that starts catching it is noticed and the mark
// updated.
func TestSchemaRejectsInvalid(t *testing.T) {
	s := compileSchema(t)
	for _, tc := range invalidCases {
		if tc.schema == schemaSkip {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			err := validate(s, tc.config)
			if tc.schema == schemaRejects {
				require.Error(t, err, "schema accepts a config Parse rejects with %q", tc.want)
			} else {
				require.NoError(t, err, "schema now rejects it (mark the case schemaRejects)")
			}
		})
	}
}

// TestSchemaMatchesParser walks schema.json and compares, for every object that admits no
// other properties, the set of its properties with the fields the parser reads that object
// with, both ways; and the enums the parser takes from a list with that list. A field deleted
// from (or added to) either side, or a new object the test does not know, fails it.
func TestSchemaMatchesParser(t *testing.T) {
	data, err := os.ReadFile("schema.json")
	require.NoError(t, err)
	var schema any
	require.NoError(t, json.Unmarshal(data, &schema))

	objects := map[string][]string{
		"#":                                     topLevelFields,
		"#/$defs/rule":                          ruleFields,
		"#/$defs/redis":                         redisFields,
		"#/$defs/redis/properties/breaker":      breakerFields,
		"#/$defs/deny":                          denyFields,
		"#/$defs/match":                         matchFields,
		"#/$defs/match/properties/path":         pathMatchFields,
		"#/$defs/headerMatch":                   headerMatchFields,
		"#/$defs/keyPart":                       keyPartFields,
		"#/$defs/cost/oneOf/1":                  costFields,
		"#/$defs/cost/oneOf/2":                  usageCostFields,
		"#/$defs/cost/oneOf/2/properties/usage": usageFields,
		"#/$defs/adaptive":                      adaptiveFields,
		"#/$defs/override":                      overrideFields,
		"#/$defs/rule/properties/lease":         leaseFields,
	}
	enums := map[string][]string{
		"#/$defs/rule/properties/algorithm":       algorithmNames,
		"#/$defs/keyPart/properties/source":       keySources,
		"#/$defs/keyPart/properties/on_duplicate": duplicates,
	}
	seen := map[string]bool{}
	var walk func(n any, ptr string)
	walk = func(n any, ptr string) {
		switch n := n.(type) {
		case map[string]any:
			if props, ok := n["properties"].(map[string]any); ok && n["additionalProperties"] == false {
				seen[ptr] = true
				want, known := objects[ptr]
				require.True(t, known, "schema.json object %s (properties %v) has no parser field list in this test", ptr, slices.Sorted(maps.Keys(props)))
				require.ElementsMatch(t, want, slices.Collect(maps.Keys(props)), "%s: the parser's fields (first) and the schema's properties (second) differ", ptr)
			}
			if e, ok := n["enum"].([]any); ok {
				if want, known := enums[ptr]; known {
					seen[ptr] = true
					var got []string
					for _, v := range e {
						got = append(got, v.(string))
					}
					require.ElementsMatch(t, want, got, "%s: the parser's values (first) and the schema's enum (second) differ", ptr)
				}
			}
			for k, v := range n {
				walk(v, ptr+"/"+k)
			}
		case []any:
			for i, v := range n {
				walk(v, ptr+"/"+strconv.Itoa(i))
			}
		}
	}
	walk(schema, "#")
	for ptr := range objects {
		require.True(t, seen[ptr], "schema.json has no closed object at %s", ptr)
	}
	for ptr := range enums {
		require.True(t, seen[ptr], "schema.json has no enum at %s", ptr)
	}
}

// TestSchemaFollowsSpecs checks the schema and the parser against each algorithm's own
// description (algorithms.Spec): an optional field (burst, variant, max_delay with mode
// "shape", the adaptive section) and the global scope are accepted by both exactly when the
// algorithm accepts them.
func TestSchemaFollowsSpecs(t *testing.T) {
	s := compileSchema(t)
	optional := map[string]string{
		algorithms.FieldBurst:    `"burst":5`,
		algorithms.FieldVariant:  `"variant":"log"`,
		algorithms.FieldMaxDelay: `"mode":"shape","max_delay":"1s"`,
		algorithms.FieldAdaptive: `"adaptive":{"min_limit":1,"max_limit":20,"error_threshold":0.5}`,
		"global":                 `"scope":"global"`,
	}
	for _, spec := range algorithms.Specs() {
		base := `"name":"r","algorithm":"` + spec.Name + `","limit":10,"window":"1s"`
		if spec.Accepts(algorithms.FieldAdaptive) {
			base += "," + optional[algorithms.FieldAdaptive]
		}
		for field, extra := range optional {
			accepts := spec.Accepts(field) || field == "global" && spec.Global
			if field == algorithms.FieldAdaptive && accepts {
				extra = "" // already in the base, which must be valid on its own
			}
			rule := base
			if extra != "" {
				rule += "," + extra
			}
			config := `{"redis":{"cluster":"webdis"},"rules":[{` + rule + `}]}`
			schemaErr := validate(s, config)
			_, parseErr := Parse([]byte(config))
			require.Equal(t, accepts, schemaErr == nil, "%s with %s: schema: %v", spec.Name, field, schemaErr)
			require.Equal(t, accepts, parseErr == nil, "%s with %s: Parse: %v", spec.Name, field, parseErr)
		}
	}
}
