package config

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

const schemaID = "https://github.com/ratelimit-wasm/ratelimit/filter/config/schema.json"

func compileSchema(t testing.TB) *jsonschema.Schema {
	t.Helper()
	f, err := os.Open("schema.json")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	doc, err := jsonschema.UnmarshalJSON(f)
	if err != nil {
		t.Fatalf("schema.json is not JSON: %v", err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	// Compiling checks schema.json against the draft 2020-12 meta-schema.
	if err := c.AddResource(schemaID, doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile(schemaID)
	if err != nil {
		t.Fatalf("schema.json does not compile: %v", err)
	}
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
	if err != nil || len(files) < 7 {
		t.Fatalf("examples: %v, %d files", err, len(files))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if err := validate(s, string(data)); err != nil {
				t.Errorf("schema rejects it: %v", err)
			}
			c, err := Parse(data)
			if err != nil {
				t.Fatalf("Parse rejects it: %v", err)
			}
			// The effective config is valid against the schema as well.
			out, _ := json.Marshal(c)
			if err := validate(s, string(out)); err != nil {
				t.Errorf("schema rejects the effective config: %v\n%s", err, out)
			}
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
			switch {
			case tc.schema == schemaRejects && err == nil:
				t.Errorf("schema accepts a config Parse rejects with %q", tc.want)
			case tc.schema == schemaAccepts && err != nil:
				t.Errorf("schema now rejects it (mark the case schemaRejects): %v", err)
			}
		})
	}
}

// TestSchemaCoversParser checks that every field name the parser knows appears in the
// schema, so that the two cannot drift apart silently.
func TestSchemaCoversParser(t *testing.T) {
	data, err := os.ReadFile("schema.json")
	if err != nil {
		t.Fatal(err)
	}
	var lists = [][]string{topLevelFields, ruleFields, redisFields, keySources, algorithmNames,
		{"min_limit", "max_limit", "target_latency", "error_threshold", "interval"},
		{"routes", "virtual_hosts", "path", "methods", "headers", "exact", "prefix", "regex", "present", "invert"},
		{"source", "name", "value", "default", "ipv4_prefix", "ipv6_prefix", "on_duplicate"},
		{"status", "body", "content_type", "failures", "cooldown", "header", "max"}}
	for _, list := range lists {
		for _, name := range list {
			if !bytes.Contains(data, []byte(`"`+name+`"`)) {
				t.Errorf("schema.json does not mention %q", name)
			}
		}
	}
}
