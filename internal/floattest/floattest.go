// Package floattest checks that a config refuses NaN and infinities in
// every float field: it finds the fields by reflection, so a float field
// added later is checked without anyone listing it, and a base config
// that leaves one unreachable (an empty slice, a nil pointer) fails the
// test instead of skipping the field. For tests only.
package floattest

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// Bad are the values every float field must refuse.
var Bad = []float64{math.NaN(), math.Inf(1), math.Inf(-1)}

// Check calls base for a valid config, which check must accept; then, for
// every float field reachable in it and every value of Bad, a fresh base
// with that one field set, which check must refuse. It fails t for a float
// field of T's type that base's value does not reach. Fields named in skip
// (type paths as reported, e.g. "Cluster.Nodes[].Weight") are left out:
// outputs, not inputs.
func Check[T any](t *testing.T, base func() T, check func(T) error, skip ...string) {
	t.Helper()
	b := base()
	if err := check(b); err != nil {
		t.Fatalf("base config refused: %v", err)
	}
	want := typePaths(reflect.TypeOf(b), "", map[reflect.Type]bool{})
	var got []string
	values(reflect.ValueOf(&b).Elem(), "", "", func(vp, tp string, _ reflect.Value) { got = append(got, tp) })
	for _, tp := range want {
		if !slices.Contains(got, tp) && !slices.Contains(skip, tp) {
			t.Errorf("float field %s is not reached by the base config: give it a value there", tp)
		}
	}
	for _, tp := range got {
		if slices.Contains(skip, tp) {
			continue
		}
		for _, x := range Bad {
			v := base()
			var path string
			values(reflect.ValueOf(&v).Elem(), "", "", func(vp, p string, f reflect.Value) {
				if p == tp && path == "" {
					f.SetFloat(x)
					path = vp
				}
			})
			if err := check(v); err == nil {
				t.Errorf("%s = %v accepted", path, x)
			} else {
				t.Logf("%s = %v: %v", path, x, err)
			}
		}
	}
}

// typePaths lists the float fields of t, as type paths.
func typePaths(t reflect.Type, path string, seen map[reflect.Type]bool) []string {
	switch t.Kind() {
	case reflect.Float32, reflect.Float64:
		return []string{path}
	case reflect.Pointer, reflect.Slice, reflect.Array:
		suffix := ""
		if t.Kind() != reflect.Pointer {
			suffix = "[]"
		}
		return typePaths(t.Elem(), path+suffix, seen)
	case reflect.Map:
		return typePaths(t.Elem(), path+"[]", seen)
	case reflect.Struct:
		if seen[t] {
			return nil
		}
		seen[t] = true
		defer delete(seen, t)
		var out []string
		for i := range t.NumField() {
			f := t.Field(i)
			if f.IsExported() {
				out = append(out, typePaths(f.Type, join(path, f.Name), seen)...)
			}
		}
		return out
	}
	return nil
}

// values calls fn for every settable float reachable in v, with its value
// path ("Queues.Cohorts[0].Weight") and type path ("Queues.Cohorts[].Weight").
// Map values are not addressable: maps of floats are reported by type only.
func values(v reflect.Value, vp, tp string, fn func(vp, tp string, f reflect.Value)) {
	switch v.Kind() {
	case reflect.Float32, reflect.Float64:
		if v.CanSet() {
			fn(vp, tp, v)
		}
	case reflect.Pointer:
		if !v.IsNil() {
			values(v.Elem(), vp, tp, fn)
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			values(v.Index(i), fmt.Sprintf("%s[%d]", vp, i), tp+"[]", fn)
		}
	case reflect.Map:
		keys := v.MapKeys()
		slices.SortFunc(keys, func(a, b reflect.Value) int { return strings.Compare(fmt.Sprint(a), fmt.Sprint(b)) })
		for _, k := range keys {
			// Copy, walk, store back, so the fields of map values can be set.
			e := reflect.New(v.Type().Elem()).Elem()
			e.Set(v.MapIndex(k))
			var set bool
			values(e, fmt.Sprintf("%s[%v]", vp, k), tp+"[]", func(a, b string, f reflect.Value) {
				fn(a, b, f)
				set = true
			})
			if set {
				v.SetMapIndex(k, e)
			}
		}
	case reflect.Struct:
		t := v.Type()
		for i := range t.NumField() {
			if f := t.Field(i); f.IsExported() {
				values(v.Field(i), join(vp, f.Name), join(tp, f.Name), fn)
			}
		}
	}
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}
