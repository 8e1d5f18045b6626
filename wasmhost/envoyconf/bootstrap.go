package envoyconf

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"

	// The typed configurations a bootstrap may carry must be registered, or protojson cannot
	// resolve their "@type" and the file is refused. These are the ones the project's
	// configurations use, plus the everyday neighbours a user is likely to add. Packages
	// imported by name elsewhere in this package (route, HTTP connection manager, the Wasm
	// filter, wasm v3) register themselves too.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/file/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/stream/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	_ "google.golang.org/protobuf/types/known/structpb"
	_ "google.golang.org/protobuf/types/known/wrapperspb"
)

// ParseBootstrap parses an Envoy bootstrap in YAML (or JSON, which is YAML) into the v3
// Bootstrap message and validates it the way Envoy does at startup: every field against the
// API's validation rules (protoc-gen-validate's ValidateAll), including the typed
// configurations packed in google.protobuf.Any fields, which the generated validators do not
// look into. Unknown fields, unknown "@type"s and rule violations are errors, with the YAML
// line where the error has one; each rule violation is a FieldError of its own (joined with
// errors.Join, in the order of the file) that names the field by its path in the YAML.
func ParseBootstrap(data []byte) (*bootstrapv3.Bootstrap, error) {
	js, lines, err := yamlToJSON(data)
	if err != nil {
		return nil, err
	}
	bs := &bootstrapv3.Bootstrap{}
	if err := (protojson.UnmarshalOptions{}).Unmarshal(js, bs); err != nil {
		return nil, fmt.Errorf("envoyconf: %s", lines.rewrite(err.Error()))
	}
	if errs := validate(bs); len(errs) > 0 {
		var doc yaml.Node
		if yaml.Unmarshal(data, &doc) == nil {
			for _, e := range errs {
				e.Line = yamlLine(&doc, e.Path)
			}
		}
		return nil, joinFieldErrors(errs)
	}
	return bs, nil
}

// lineMap maps line numbers of the generated JSON to lines of the YAML source, so that an
// error protojson reports at a JSON position can name the YAML line a person wrote.
type lineMap []int

var (
	jsonPos     = regexp.MustCompile(`^(.*?)\s*\(line (\d+):(\d+)\):\s*`)
	protoPrefix = regexp.MustCompile(`^proto:[\s\x{00a0}]*`)
)

// rewrite turns protojson's `proto: (line 43:5): unknown field "x"` into
// `YAML line 21: unknown field "x"`. (The protobuf module randomly puts a non-breaking space
// after "proto:" so that nobody depends on its messages; both forms are handled.)
func (lm lineMap) rewrite(msg string) string {
	msg = strings.ReplaceAll(protoPrefix.ReplaceAllString(msg, ""), "\u00a0", " ")
	m := jsonPos.FindStringSubmatch(msg)
	if m == nil {
		return msg
	}
	rest := msg[len(m[0]):]
	if m[1] != "" {
		rest = m[1] + ": " + rest
	}
	n, _ := strconv.Atoi(m[2])
	if n >= 1 && n <= len(lm) && lm[n-1] > 0 {
		return fmt.Sprintf("YAML line %d: %s", lm[n-1], rest)
	}
	return rest
}

// yamlToJSON converts YAML to JSON with one mapping key or sequence item per line, and
// records for each JSON line the YAML line it came from. Anchors, aliases and merge keys
// ("<<") are resolved as YAML defines them.
func yamlToJSON(data []byte) ([]byte, lineMap, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, nil, fmt.Errorf("envoyconf: %w", err)
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return nil, nil, errors.New("envoyconf: the file is empty")
	}
	e := &jsonEncoder{}
	if err := e.value(doc.Content[0], 0); err != nil {
		return nil, nil, err
	}
	e.buf.WriteByte('\n')
	return e.buf.Bytes(), e.lines, nil
}

type jsonEncoder struct {
	buf   bytes.Buffer
	lines lineMap
	depth int
}

// newline starts a new JSON line that belongs to YAML line src.
func (e *jsonEncoder) newline(src int) {
	if len(e.lines) > 0 || e.buf.Len() > 0 {
		e.buf.WriteByte('\n')
	}
	e.lines = append(e.lines, src)
	e.buf.WriteString(strings.Repeat(" ", e.depth))
}

func (e *jsonEncoder) value(n *yaml.Node, depth int) error {
	if depth > 200 {
		return errors.New("envoyconf: YAML nested too deeply (or a recursive alias)")
	}
	if len(e.lines) == 0 {
		e.newline(n.Line)
	}
	switch n.Kind {
	case yaml.AliasNode:
		return e.value(n.Alias, depth+1)
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			e.buf.WriteString("null")
			return nil
		}
		return e.value(n.Content[0], depth+1)
	case yaml.MappingNode:
		pairs, err := mappingPairs(n, depth)
		if err != nil {
			return err
		}
		e.buf.WriteByte('{')
		e.depth++
		for i, p := range pairs {
			if i > 0 {
				e.buf.WriteByte(',')
			}
			e.newline(p.key.Line)
			k, _ := json.Marshal(p.key.Value)
			e.buf.Write(k)
			e.buf.WriteString(": ")
			if err := e.value(p.val, depth+1); err != nil {
				return err
			}
		}
		e.depth--
		if len(pairs) > 0 {
			e.newline(n.Line)
		}
		e.buf.WriteByte('}')
	case yaml.SequenceNode:
		e.buf.WriteByte('[')
		e.depth++
		for i, c := range n.Content {
			if i > 0 {
				e.buf.WriteByte(',')
			}
			e.newline(c.Line)
			if err := e.value(c, depth+1); err != nil {
				return err
			}
		}
		e.depth--
		if len(n.Content) > 0 {
			e.newline(n.Line)
		}
		e.buf.WriteByte(']')
	case yaml.ScalarNode:
		var v any
		if err := n.Decode(&v); err != nil {
			return fmt.Errorf("envoyconf: YAML line %d: %w", n.Line, err)
		}
		js, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("envoyconf: YAML line %d: %w", n.Line, err)
		}
		e.buf.Write(js)
	default:
		return fmt.Errorf("envoyconf: YAML line %d: unsupported node", n.Line)
	}
	return nil
}

type pair struct{ key, val *yaml.Node }

// mappingPairs returns a mapping's key/value pairs with merge keys applied: keys written in
// the mapping itself win over merged ones, and earlier merged mappings win over later ones.
func mappingPairs(n *yaml.Node, depth int) ([]pair, error) {
	if depth > 200 {
		return nil, errors.New("envoyconf: YAML nested too deeply (or a recursive alias)")
	}
	var own, merged []pair
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.Tag == "!!merge" {
			srcs := []*yaml.Node{v}
			if resolve(v).Kind == yaml.SequenceNode {
				srcs = resolve(v).Content
			}
			for _, s := range srcs {
				s = resolve(s)
				if s.Kind != yaml.MappingNode {
					return nil, fmt.Errorf("envoyconf: YAML line %d: a merge key needs a mapping", k.Line)
				}
				ps, err := mappingPairs(s, depth+1)
				if err != nil {
					return nil, err
				}
				merged = append(merged, ps...)
			}
			continue
		}
		if k.Kind != yaml.ScalarNode {
			return nil, fmt.Errorf("envoyconf: YAML line %d: mapping keys must be strings", k.Line)
		}
		if seen[k.Value] {
			return nil, fmt.Errorf("envoyconf: YAML line %d: duplicate key %q", k.Line, k.Value)
		}
		seen[k.Value] = true
		own = append(own, pair{k, v})
	}
	for _, p := range merged {
		if !seen[p.key.Value] {
			seen[p.key.Value] = true
			own = append(own, p)
		}
	}
	return own, nil
}

func resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n.Kind == yaml.AliasNode && i < 100; i++ {
		n = n.Alias
	}
	return n
}
