package envoyconf

import (
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
)

// The API's validation rules come with the generated code of go-control-plane: every message
// has ValidateAll, which returns one typed error per violation, named after Go (the field
// "HttpFilters[0]" of "HttpConnectionManager"), with an embedded message's violations nested
// as the error's cause. A person reads the YAML, which names the same field
// "http_filters[0]" under the path that leads to it. This file runs the rules on a bootstrap
// and every typed configuration in it, and turns each violation into a FieldError: the full
// path in the YAML's field names, the rule's reason, and (from ParseBootstrap) the YAML line.

// FieldError is one violation of the API's validation rules.
type FieldError struct {
	// Path is the field's path in proto field names, as YAML and protojson write them:
	// "static_resources.listeners[0].filter_chains[0].filters[0].typed_config.stat_prefix".
	// A list element is "[i]", a map entry `["key"]`; the fields of a message packed in a
	// typed_config (an Any) follow it directly, as they do in the YAML. Empty for the root.
	Path string
	// Reason is what the rule requires: "value length must be at least 1 runes".
	Reason string
	// Type is set when a violation could not be translated to a field path: the full name
	// of the message at Path, whose own validator's text Reason then is.
	Type string
	// Line is the YAML line of the field, or of the closest enclosing field the file writes
	// (a missing required field is reported at its parent); 0 when unknown.
	Line int
}

func (e *FieldError) Error() string {
	var b strings.Builder
	b.WriteString("envoyconf: ")
	if e.Line > 0 {
		b.WriteString("YAML line " + strconv.Itoa(e.Line) + ": ")
	}
	where := e.Path
	if e.Type != "" {
		if where == "" {
			where = e.Type
		} else {
			where += " (" + e.Type + ")"
		}
	}
	if where != "" {
		b.WriteString(where + ": ")
	}
	b.WriteString(e.Reason)
	return b.String()
}

// Validate runs the API's validation rules on m and, recursively, on every message packed in
// a google.protobuf.Any inside it (typed_config, typed_per_filter_config, plugin
// configurations...). Every violation is reported as a FieldError of its own (errors.Join),
// in a fixed order: m's own violations in field order, then those inside each Any.
func Validate(m proto.Message) error {
	return joinFieldErrors(validate(m))
}

func validate(m proto.Message) []*FieldError {
	var errs []*FieldError
	validateTree(m.ProtoReflect(), "", &errs)
	return errs
}

// joinFieldErrors joins errs in the order of their YAML lines (when known; a stable sort, so
// the errors of one line keep their order, and those without a line come last).
func joinFieldErrors(errs []*FieldError) error {
	sort.SliceStable(errs, func(i, j int) bool {
		li, lj := errs[i].Line, errs[j].Line
		return li > 0 && (lj == 0 || li < lj)
	})
	all := make([]error, len(errs))
	for i, e := range errs {
		all[i] = e
	}
	return errors.Join(all...)
}

type validator interface{ ValidateAll() error }

// ruleError is the error type the generated validators define for each message
// (HttpConnectionManagerValidationError...): one violation at the Go field Field ("StatPrefix",
// "HttpFilters[0]", "TypedPerFilterConfig[key]", or a oneof's name when none of its members
// is set but one is required), and for an embedded message, its own violations as Cause.
type ruleError interface {
	error
	Field() string
	Reason() string
	Cause() error
}

// multiError is the list of violations ValidateAll returns (HttpConnectionManagerMultiError...).
type multiError interface {
	error
	AllErrors() []error
}

func validateTree(m protoreflect.Message, path string, errs *[]*FieldError) {
	if v, ok := m.Interface().(validator); ok {
		if err := v.ValidateAll(); err != nil {
			translate(m, path, err, errs)
		}
	}
	walkAnys(m, path, errs)
}

// translate appends to errs a FieldError for each violation in err, which ValidateAll
// returned for m, found at path. A violation whose field cannot be found in m is reported
// with the validator's own text after path and m's type, rather than at a guessed field.
func translate(m protoreflect.Message, path string, err error, errs *[]*FieldError) {
	if me, ok := err.(multiError); ok {
		for _, e := range me.AllErrors() {
			translate(m, path, e, errs)
		}
		return
	}
	untranslated := &FieldError{Path: path, Type: string(m.Descriptor().FullName()), Reason: err.Error()}
	re, ok := err.(ruleError)
	if !ok {
		*errs = append(*errs, untranslated)
		return
	}
	s, ok := resolveField(m, re.Field())
	if !ok {
		*errs = append(*errs, untranslated)
		return
	}
	at := joinPath(path, s.segment)
	if cause := re.Cause(); cause != nil {
		if s.sub == nil {
			*errs = append(*errs, untranslated)
			return
		}
		translate(s.sub, at, cause, errs)
		return
	}
	reason := re.Reason()
	if s.oneof != nil {
		names := make([]string, s.oneof.Fields().Len())
		for i := range names {
			names[i] = string(s.oneof.Fields().Get(i).Name())
		}
		reason += " (one of " + strings.Join(names, ", ") + ")"
	}
	*errs = append(*errs, &FieldError{Path: at, Reason: reason})
}

// resolved is a validator's field name resolved in a message.
type resolved struct {
	// segment is the field's part of the path: "http_filters[0]", `metadata["key"]`, or a
	// oneof's name.
	segment string
	// sub is the message at the field (the list element, the map value), nil when the field
	// is not a message or not set.
	sub protoreflect.Message
	// oneof is set when the name is a oneof's rather than a field's.
	oneof protoreflect.OneofDescriptor
}

// resolveField finds the field the generated validator of m calls goName: a Go field name,
// with "[i]" for a list element or "[key]" for a map entry. The Go name is mapped to the
// proto name by the struct field's protobuf tag; a oneof member is a field of the wrapper
// struct the oneof holds, which is the one that is set (the validators check only the member
// that is set).
func resolveField(m protoreflect.Message, goName string) (resolved, bool) {
	name, sel, indexed := goName, "", false
	if i := strings.IndexByte(goName, '['); i >= 0 && strings.HasSuffix(goName, "]") {
		name, sel, indexed = goName[:i], goName[i+1:len(goName)-1], true
	}
	protoName, oneofName := protoFieldName(m, name)
	if oneofName != "" && !indexed {
		od := m.Descriptor().Oneofs().ByName(protoreflect.Name(oneofName))
		if od == nil {
			return resolved{}, false
		}
		return resolved{segment: oneofName, oneof: od}, true
	}
	if protoName == "" {
		return resolved{}, false
	}
	fd := m.Descriptor().Fields().ByName(protoreflect.Name(protoName))
	if fd == nil {
		return resolved{}, false
	}
	r := resolved{segment: protoName}
	isMessage := func(fd protoreflect.FieldDescriptor) bool {
		return fd.Kind() == protoreflect.MessageKind || fd.Kind() == protoreflect.GroupKind
	}
	switch {
	case fd.IsList():
		if !indexed {
			break // a rule on the list itself (min_items...)
		}
		i, err := strconv.Atoi(sel)
		if err != nil || i < 0 {
			return resolved{}, false
		}
		r.segment += "[" + sel + "]"
		if l := m.Get(fd).List(); isMessage(fd) && i < l.Len() {
			r.sub = l.Get(i).Message()
		}
	case fd.IsMap():
		if !indexed {
			break
		}
		r.segment += mapKeySegment(fd.MapKey().Kind(), sel)
		m.Get(fd).Map().Range(func(k protoreflect.MapKey, v protoreflect.Value) bool {
			if fmt.Sprint(k.Interface()) != sel {
				return true
			}
			if isMessage(fd.MapValue()) {
				r.sub = v.Message()
			}
			return false
		})
	case indexed:
		return resolved{}, false
	case isMessage(fd) && m.Has(fd):
		r.sub = m.Get(fd).Message()
	}
	return r, true
}

// protoFieldName maps the Go name of a field of m's generated struct to the field's proto
// name, or, when goName is a oneof's Go name, to the oneof's proto name. Both are "" when m
// has no such field (or is not a generated struct).
func protoFieldName(m protoreflect.Message, goName string) (field, oneof string) {
	v := reflect.ValueOf(m.Interface())
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return "", ""
	}
	v = v.Elem()
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if name, ok := f.Tag.Lookup("protobuf_oneof"); ok {
			if f.Name == goName {
				return "", name
			}
			// The set member is a pointer to a wrapper struct whose one field is the member,
			// tagged like any other field.
			w := v.Field(i)
			if w.Kind() != reflect.Interface || w.IsNil() {
				continue
			}
			wt := w.Elem().Type()
			if wt.Kind() != reflect.Pointer || wt.Elem().Kind() != reflect.Struct || wt.Elem().NumField() != 1 {
				continue
			}
			if mf := wt.Elem().Field(0); mf.Name == goName {
				return tagName(mf.Tag.Get("protobuf")), ""
			}
			continue
		}
		if f.Name == goName {
			return tagName(f.Tag.Get("protobuf")), ""
		}
	}
	return "", ""
}

// tagName is the name=... of a protobuf struct tag ("bytes,2,opt,name=stat_prefix,json=statPrefix,proto3").
func tagName(tag string) string {
	for _, part := range strings.Split(tag, ",") {
		if name, ok := strings.CutPrefix(part, "name="); ok {
			return name
		}
	}
	return ""
}

// mapKeySegment is the path's selector of a map entry: a string key quoted, any other as it is.
func mapKeySegment(kind protoreflect.Kind, key string) string {
	if kind == protoreflect.StringKind {
		return "[" + strconv.Quote(key) + "]"
	}
	return "[" + key + "]"
}

// walkAnys finds every Any below m, unpacks it and validates its content as a tree of its own
// (the enclosing message's ValidateAll has already covered everything else). Fields are
// visited in the order the message declares them, map entries in the order of their keys.
func walkAnys(m protoreflect.Message, path string, errs *[]*FieldError) {
	fields := m.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		if !m.Has(fd) {
			continue
		}
		v := m.Get(fd)
		name := joinPath(path, string(fd.Name()))
		switch {
		case fd.IsMap():
			if fd.MapValue().Kind() != protoreflect.MessageKind {
				continue
			}
			keys := make([]string, 0, v.Map().Len())
			vals := map[string]protoreflect.Message{}
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				keys = append(keys, k.String())
				vals[k.String()] = mv.Message()
				return true
			})
			sort.Strings(keys)
			for _, k := range keys {
				visit(vals[k], name+mapKeySegment(fd.MapKey().Kind(), k), errs)
			}
		case fd.IsList():
			if fd.Kind() != protoreflect.MessageKind && fd.Kind() != protoreflect.GroupKind {
				continue
			}
			l := v.List()
			for i := 0; i < l.Len(); i++ {
				visit(l.Get(i).Message(), name+"["+strconv.Itoa(i)+"]", errs)
			}
		case fd.Kind() == protoreflect.MessageKind || fd.Kind() == protoreflect.GroupKind:
			visit(v.Message(), name, errs)
		}
	}
}

func visit(m protoreflect.Message, path string, errs *[]*FieldError) {
	if a, ok := m.Interface().(*anypb.Any); ok {
		inner, err := a.UnmarshalNew()
		if err != nil {
			*errs = append(*errs, &FieldError{Path: path, Reason: err.Error()})
			return
		}
		validateTree(inner.ProtoReflect(), path, errs)
		return
	}
	walkAnys(m, path, errs)
}

func joinPath(path, field string) string {
	if path == "" {
		return field
	}
	return path + "." + field
}

// yamlLine returns the line in doc (a parsed YAML file) of the field a FieldError's path
// names: its key's line for a mapping member, the element's for a list element. A path the
// file does not write to the end (a missing required field, the inside of a well-known type
// packed in an Any) is reported at the last part that it does write; 0 when not even the
// first. A field is found by its proto name or its JSON name, as protojson accepts either.
func yamlLine(doc *yaml.Node, path string) int {
	n := resolve(doc)
	if n.Kind == yaml.DocumentNode {
		if len(n.Content) == 0 {
			return 0
		}
		n = resolve(n.Content[0])
	}
	line := 0
	for path != "" {
		var next *yaml.Node
		if path[0] == '[' {
			sel, rest, ok := cutSelector(path)
			if !ok {
				return line
			}
			path = rest
			switch n.Kind {
			case yaml.SequenceNode:
				if i, err := strconv.Atoi(sel); err == nil && i >= 0 && i < len(n.Content) {
					next = n.Content[i]
					line = next.Line
				}
			case yaml.MappingNode:
				if v, l := member(n, func(k string) bool { return k == sel }); v != nil {
					next, line = v, l
				}
			}
		} else {
			end := strings.IndexAny(path, ".[")
			if end < 0 {
				end = len(path)
			}
			name := path[:end]
			path = path[end:]
			if n.Kind == yaml.MappingNode {
				if v, l := member(n, func(k string) bool { return sameField(k, name) }); v != nil {
					next, line = v, l
				}
			}
		}
		if next == nil {
			return line
		}
		n = resolve(next)
		path = strings.TrimPrefix(path, ".")
	}
	return line
}

// member returns the value of the member of mapping n (merge keys applied) whose key
// matches, and the key's line; nil when there is none.
func member(n *yaml.Node, match func(string) bool) (*yaml.Node, int) {
	pairs, err := mappingPairs(n, 0)
	if err != nil {
		return nil, 0
	}
	for _, p := range pairs {
		if match(p.key.Value) {
			return p.val, p.key.Line
		}
	}
	return nil, 0
}

// cutSelector splits a path that starts with a selector ("[3]", `["key"]`) into the
// selector's content (the index, the unquoted key) and the rest of the path.
func cutSelector(path string) (sel, rest string, ok bool) {
	if strings.HasPrefix(path, `["`) {
		q, err := strconv.QuotedPrefix(path[1:])
		if err != nil || !strings.HasPrefix(path[1+len(q):], "]") {
			return "", "", false
		}
		key, err := strconv.Unquote(q)
		if err != nil {
			return "", "", false
		}
		return key, path[1+len(q)+1:], true
	}
	end := strings.IndexByte(path, ']')
	if end < 0 {
		return "", "", false
	}
	return path[1:end], path[end+1:], true
}

// sameField reports whether a YAML key names the field whose proto name is name: the proto
// name itself ("stat_prefix") or its JSON name ("statPrefix"), which is the proto name with the
// underscores dropped and the letters after them capitalised. Only a line is looked up with it,
// and the fields of one message never differ by underscores and case alone (protoc refuses
// JSON names that collide).
func sameField(key, name string) bool {
	return key == name || strings.EqualFold(key, strings.ReplaceAll(name, "_", ""))
}
