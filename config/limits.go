package config

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
)

// Limits of the file. Every count, size and repetition a file can ask for
// is bounded, and checked before anything proportional to it is allocated,
// so that any file is answered in bounded time and memory. The counts the
// core packages bound as well are their limits (topo.MaxNodes, ...), so the
// file and the library agree. docs/config.md lists them in a table.
const (
	// MaxFileSize bounds the bytes Read accepts.
	MaxFileSize = 2 << 20
	// MaxYAMLNodes bounds the YAML nodes of the document, every alias
	// counted as the nodes it stands for (a "billion laughs" file is
	// refused before it is expanded).
	MaxYAMLNodes = 1 << 18
	// MaxYAMLDepth bounds the nesting of mappings and sequences (the
	// deepest field of a valid file is at depth 7).
	MaxYAMLDepth = 32
	// MaxNodes bounds the nodes of the cluster: every entry's count and
	// all entries together.
	MaxNodes = topo.MaxNodes
	// MaxGPUsPerNode bounds a node's gpus.
	MaxGPUsPerNode = topo.MaxGPUsPerNode
	// MaxLevels bounds cluster.levels and, apart, cluster.gpuLevels.
	MaxLevels = topo.MaxLevels
	// MaxLabels bounds the labels of a node and a partition's selector.
	MaxLabels = 64
	// MaxStringLen bounds every name and string value, in bytes (a DNS
	// name's length, as Kubernetes bounds its names).
	MaxStringLen = 253
	// MaxQueueEntries bounds the queues, cohorts and accounts together.
	MaxQueueEntries = queue.MaxTreeNodes
	// MaxQueueDepth bounds the cohorts above a queue or cohort.
	MaxQueueDepth = queue.MaxDepth
	// MaxResources bounds the distinct quota resources of the tree.
	MaxResources = queue.MaxResources
	// MaxPartitions bounds site.partitions.
	MaxPartitions = 1024
	// MaxListLen bounds every other list: a partition's nodes,
	// allowAccounts, allowQueues and domains, site.limits.accounts.
	MaxListLen = topo.MaxNodes
	// MaxTargetShapes bounds engine.scorer.target.
	MaxTargetShapes = gang.MaxTargetShapes
	// MaxIntakeCapacity bounds engine.intakeCapacity (allocated up front).
	MaxIntakeCapacity = queue.MaxIntakeCapacity
	// MaxSharingReplicas bounds sharing.replicas.
	MaxSharingReplicas = 1024
)

// ErrLimit is wrapped by the *LimitError of every limit above: a file
// over one is refused with errors.Is(err, ErrLimit).
var ErrLimit = errors.New("config: over a limit")

// LimitError names the field over its limit, the value found and the
// limit. It comes wrapped in a *FieldError (which adds the line).
type LimitError struct {
	Field string // the field's path, as in FieldError
	Value int64  // what the file asks for (a count, a size, a length)
	Limit int64  // the most allowed
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("%s: %d, over the limit of %d", e.Field, e.Value, e.Limit)
}

// Unwrap gives ErrLimit.
func (e *LimitError) Unwrap() error { return ErrLimit }

// ErrNotFinite is wrapped by the *FieldError of a number that is NaN or
// infinite (YAML's .nan and .inf), wherever the file takes a float.
var ErrNotFinite = errors.New("config: not a finite number")

// overLimit returns the *FieldError of path for a value over limit, or
// nil.
func (f *File) overLimit(path string, value, limit int) error {
	if value <= limit {
		return nil
	}
	le := &LimitError{Field: path, Value: int64(value), Limit: int64(limit)}
	return &FieldError{Path: path, Line: f.lines.line(path), Msg: fmt.Sprintf("%d, over the limit of %d", value, limit), Err: le}
}

// checkYAML bounds the parsed document before it is decoded into a File:
// its nesting and its size with every alias expanded. The walk visits each
// node once (an anchor's expanded size is remembered), so it is linear in
// the parsed document.
func checkYAML(root *yaml.Node) error {
	sizes := map[*yaml.Node]int{}
	var walk func(n *yaml.Node, depth int) (int, error)
	walk = func(n *yaml.Node, depth int) (int, error) {
		if depth > MaxYAMLDepth {
			return 0, yamlLimit("nesting", n.Line, depth, MaxYAMLDepth)
		}
		if n.Kind == yaml.AliasNode {
			n = n.Alias
			if n == nil {
				return 1, nil
			}
		}
		if s, ok := sizes[n]; ok {
			return s, nil
		}
		sizes[n] = math.MaxInt32 // an alias to an anchor being walked: a cycle
		size := 1
		for _, c := range n.Content {
			s, err := walk(c, depth+1)
			if err != nil {
				return 0, err
			}
			if size += s; size > MaxYAMLNodes {
				return 0, yamlLimit("nodes", n.Line, size, MaxYAMLNodes)
			}
		}
		sizes[n] = size
		return size, nil
	}
	_, err := walk(root, 0)
	return err
}

func yamlLimit(what string, line, value, limit int) error {
	path := "(file)." + what
	return &FieldError{Path: path, Line: line, Msg: fmt.Sprintf("YAML %s: %d, over the limit of %d (aliases count as what they expand to)", what, value, limit),
		Err: &LimitError{Field: path, Value: int64(value), Limit: int64(limit)}}
}

// checkLimits checks the counts and lengths of f before Build expands or
// copies anything: the node count summed over entries, list lengths,
// label counts and string lengths.
func (f *File) checkLimits() error {
	var errs []error
	limit := func(path string, value, max int) {
		if len(errs) == 0 {
			if err := f.overLimit(path, value, max); err != nil {
				errs = append(errs, err)
			}
		}
	}
	str := func(path, s string) { limit(path, len(s), MaxStringLen) }
	strs := func(path string, ss []string, max int) {
		limit(path, len(ss), max)
		for i, s := range ss {
			str(fmt.Sprintf("%s[%d]", path, i), s)
		}
	}
	labels := func(path string, m map[string]string) {
		limit(path, len(m), MaxLabels)
		for _, k := range sortedKeys(m) {
			str(path+"."+k, k)
			str(path+"."+k, m[k])
		}
	}
	c := &f.Cluster
	strs("cluster.levels", c.Levels, MaxLevels)
	strs("cluster.gpuLevels", c.GPULevels, MaxLevels)
	limit("cluster.nodes", len(c.Nodes), MaxNodes)
	total := 0
	for i := range c.Nodes {
		if len(errs) > 0 {
			break
		}
		n := &c.Nodes[i]
		p := fmt.Sprintf("cluster.nodes[%d]", i)
		limit(p+".count", n.Count, MaxNodes)
		total += max(n.Count, 1) // each term at most MaxNodes: no overflow
		limit("cluster.nodes", total, MaxNodes)
		str(p+".name", n.Name)
		strs(p+".domains", n.Domains, MaxLevels)
		limit(p+".gpus", n.GPUs, MaxGPUsPerNode)
		str(p+".gpuModel", n.GPUModel)
		str(p+".state", n.State)
		str(p+".migLayout", n.MIGLayout)
		labels(p+".labels", n.Labels)
		limit(p+".gpuDomains", len(n.GPUDomains), MaxLevels)
		for l, d := range n.GPUDomains {
			limit(fmt.Sprintf("%s.gpuDomains[%d]", p, l), len(d), MaxGPUsPerNode)
		}
		if s := n.Sharing; s != nil {
			str(p+".sharing.mode", s.Mode)
			limit(p+".sharing.replicas", s.Replicas, MaxSharingReplicas)
		}
	}
	q := &f.Queues
	limit("queues", len(q.Cohorts)+len(q.Queues)+len(q.Accounts), MaxQueueEntries)
	quota := func(p string, m map[string]Quota) {
		limit(p+".quota", len(m), MaxResources)
		for _, k := range sortedKeys(m) {
			str(p+".quota."+k, k)
		}
	}
	for i, co := range q.Cohorts {
		p := fmt.Sprintf("queues.cohorts[%d]", i)
		str(p+".name", co.Name)
		str(p+".parent", co.Parent)
		quota(p, co.Quota)
	}
	for i, qu := range q.Queues {
		p := fmt.Sprintf("queues.queues[%d]", i)
		str(p+".name", qu.Name)
		str(p+".cohort", qu.Cohort)
		quota(p, qu.Quota)
	}
	for i, a := range q.Accounts {
		p := fmt.Sprintf("queues.accounts[%d]", i)
		str(p+".name", a.Name)
		str(p+".parent", a.Parent)
	}
	e := &f.Engine
	str("engine.policy.name", e.Policy.Name)
	str("engine.backfill.mode", e.Backfill.Mode)
	str("engine.nodeFailure", e.NodeFailure)
	str("engine.scorer.name", e.Scorer.Name)
	limit("engine.intakeCapacity", e.IntakeCapacity, MaxIntakeCapacity)
	limit("engine.scorer.target", len(e.Scorer.Target), MaxTargetShapes)
	for i, sh := range e.Scorer.Target {
		str(fmt.Sprintf("engine.scorer.target[%d].model", i), sh.Model)
	}
	if s := f.Site; s != nil {
		str("site.neverMet", s.NeverMet)
		limit("site.partitions", len(s.Partitions), MaxPartitions)
		for i, pt := range s.Partitions {
			if len(errs) > 0 {
				break
			}
			p := fmt.Sprintf("site.partitions[%d]", i)
			str(p+".name", pt.Name)
			str(p+".preemptMode", pt.PreemptMode)
			strs(p+".nodes", pt.Nodes, MaxListLen)
			labels(p+".selector", pt.Selector)
			strs(p+".allowAccounts", pt.AllowAccounts, MaxListLen)
			strs(p+".allowQueues", pt.AllowQueues, MaxListLen)
			limit(p+".domains", len(pt.Domains), MaxListLen)
			for j, d := range pt.Domains {
				str(fmt.Sprintf("%s.domains[%d].level", p, j), d.Level)
				str(fmt.Sprintf("%s.domains[%d].name", p, j), d.Name)
			}
		}
		if l := s.Limits; l != nil {
			limit("site.limits.accounts", len(l.Accounts), MaxListLen)
			for _, k := range sortedKeys(l.Accounts) {
				str("site.limits.accounts."+k, k)
			}
		}
	}
	if len(errs) > 0 {
		return errs[0]
	}
	return nil
}

// finite returns the *FieldError of a float field that is NaN or
// infinite, or nil.
func (f *File) finite(path string, v float64) error {
	if !math.IsNaN(v) && !math.IsInf(v, 0) {
		return nil
	}
	return &FieldError{Path: path, Line: f.lines.line(path), Msg: fmt.Sprintf("must be a finite number, got %v", v), Err: ErrNotFinite}
}

// checkFloats refuses NaN and infinities in every float field of f, found
// by reflection so that a float field added later is checked too; the
// path is written with the fields' YAML names.
func (f *File) checkFloats() error {
	var walk func(v reflect.Value, path string) error
	walk = func(v reflect.Value, path string) error {
		switch v.Kind() {
		case reflect.Float32, reflect.Float64:
			return f.finite(path, v.Float())
		case reflect.Pointer:
			if !v.IsNil() {
				return walk(v.Elem(), path)
			}
		case reflect.Struct:
			t := v.Type()
			for i := range t.NumField() {
				sf := t.Field(i)
				if !sf.IsExported() {
					continue
				}
				name, _, _ := strings.Cut(sf.Tag.Get("yaml"), ",")
				p := name
				if path != "" {
					p = path + "." + name
				}
				if err := walk(v.Field(i), p); err != nil {
					return err
				}
			}
		case reflect.Slice:
			for i := range v.Len() {
				if err := walk(v.Index(i), fmt.Sprintf("%s[%d]", path, i)); err != nil {
					return err
				}
			}
		case reflect.Map:
			if v.Type().Key().Kind() != reflect.String {
				return nil
			}
			keys := v.MapKeys()
			slices.SortFunc(keys, func(a, b reflect.Value) int { return strings.Compare(a.String(), b.String()) })
			for _, k := range keys {
				if err := walk(v.MapIndex(k), path+"."+k.String()); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return walk(reflect.ValueOf(f).Elem(), "")
}
