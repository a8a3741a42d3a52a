package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Read parses one document, YAML or JSON, refusing unknown fields, and
// validates it. The File remembers the line of each field, so that later
// Validate errors name it too. Any input is answered in bounded time and
// memory: the size, the YAML nesting and the YAML nodes (aliases expanded)
// are checked before the document is decoded, and every count of the File
// before it is built (see the limits in limits.go; errors over a limit
// wrap ErrLimit).
func Read(data []byte) (*File, error) {
	if len(data) > MaxFileSize {
		return nil, &FieldError{Path: "(file)", Msg: fmt.Sprintf("%d bytes, over the limit of %d", len(data), MaxFileSize),
			Err: &LimitError{Field: "(file)", Value: int64(len(data)), Limit: MaxFileSize}}
	}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, &FieldError{Path: "(file)", Msg: err.Error(), Err: err}
	}
	if root.Kind == 0 {
		return nil, &FieldError{Path: "(file)", Msg: "empty document"}
	}
	if err := checkYAML(&root); err != nil {
		return nil, err
	}
	f := &File{}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(f); err != nil {
		return nil, &FieldError{Path: "(file)", Msg: strings.TrimPrefix(err.Error(), "yaml: "), Err: err}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, &FieldError{Path: "(file)", Line: extra.Line, Msg: "more than one document"}
	}
	normalize(reflect.ValueOf(f))
	f.lines = indexLines(&root)
	if err := f.Validate(); err != nil {
		return f, err
	}
	return f, nil
}

// ReadFile reads and validates the file at path.
func ReadFile(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return Read(data)
}

// YAML writes f as YAML.
func (f *File) YAML() ([]byte, error) {
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(f); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return b.Bytes(), nil
}

// JSON writes f as indented JSON.
func (f *File) JSON() ([]byte, error) {
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return append(b, '\n'), nil
}

func (f *File) clone() *File {
	b, err := json.Marshal(f)
	if err != nil {
		panic(fmt.Sprintf("config: clone: %v", err)) // every field marshals
	}
	g := &File{}
	if err := json.Unmarshal(b, g); err != nil {
		panic(fmt.Sprintf("config: clone: %v", err))
	}
	g.lines = f.lines
	return g
}

// lineIndex maps a field path ("queues.queues[1].quota.gpu") to its line.
type lineIndex map[string]int

func indexLines(root *yaml.Node) *lineIndex {
	idx := lineIndex{}
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		switch n.Kind {
		case yaml.DocumentNode:
			for _, c := range n.Content {
				walk(c, path)
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				p := k.Value
				if path != "" {
					p = path + "." + k.Value
				}
				idx[p] = k.Line
				walk(v, p)
			}
		case yaml.SequenceNode:
			for i, c := range n.Content {
				p := fmt.Sprintf("%s[%d]", path, i)
				idx[p] = c.Line
				walk(c, p)
			}
		}
	}
	walk(root, "")
	return &idx
}

// line returns the line of path, or of its nearest ancestor that was
// written; 0 without an index.
func (l *lineIndex) line(path string) int {
	if l == nil {
		return 0
	}
	for p := path; p != ""; {
		if n, ok := (*l)[p]; ok {
			return n
		}
		i := strings.LastIndexAny(p, ".[")
		if i < 0 {
			break
		}
		p = p[:i]
	}
	return 0
}

// normalize sets every empty slice and map of v (a pointer) to nil, so
// that "nodes: []" and an absent "nodes" read as the same File.
func normalize(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			normalize(v.Elem())
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if f := v.Field(i); f.CanSet() {
				normalize(f)
			}
		}
	case reflect.Slice:
		if v.Len() == 0 {
			v.SetZero()
			return
		}
		for i := range v.Len() {
			normalize(v.Index(i))
		}
	case reflect.Map:
		if v.Len() == 0 {
			v.SetZero()
			return
		}
		// Map values are not addressable: normalise copies and store them.
		for _, k := range v.MapKeys() {
			e := reflect.New(v.Type().Elem()).Elem()
			e.Set(v.MapIndex(k))
			normalize(e)
			v.SetMapIndex(k, e)
		}
	}
}
