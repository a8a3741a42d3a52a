package gang

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Request asks for one gang: one or more groups of members, all placed or none.
//
// A member is one process (a pod, a SLURM task) that runs on exactly one node.
type Request struct {
	// Groups are the member groups. At least one.
	Groups []Group
	// Required names a topology level (e.g. "block"): every member must land
	// inside one domain of that level. Empty: no requirement.
	Required string `json:",omitzero"`
	// Preferred names a topology level finer than Required (e.g. "rack"):
	// the placement uses the fewest domains of that level that can hold the
	// gang. Empty: the finest level above the node is used, so gangs are
	// always compact.
	Preferred string `json:",omitzero"`
}

// Group is a set of identical members.
type Group struct {
	// Name is informational (e.g. "worker").
	Name string `json:",omitzero"`
	// Members is the number of members. At least one.
	Members int `json:",omitzero"`
	// GPUsPerMember is the number of whole GPUs each member needs on its
	// node. Zero for CPU-only members or for fractional members (GPUMilli or
	// MIGProfile set).
	GPUsPerMember int `json:",omitzero"`
	// GPUMilli asks for a fraction of one GPU per member, in thousandths
	// (1..999): a shared GPU (time-slicing / MPS) or, where the GPU is in MIG
	// mode, the smallest MIG instance that holds that fraction.
	GPUMilli int `json:",omitzero"`
	// MIGProfile asks for one MIG instance of this profile per member
	// (e.g. "1g.10gb").
	MIGProfile string `json:",omitzero"`
	// GPUMemoryMiB is the device memory each fractional member (GPUMilli)
	// needs, 0 for none: on a MIG GPU the instance's memory must hold it, on
	// an MPS GPU it is the client's pinned memory limit, on a time-slicing
	// GPU that accounts memory (mig.Sharing.MemoryMiB) it is booked, so
	// that the bookings of a GPU's shares never pass its memory.
	GPUMemoryMiB int `json:",omitzero"`
	// CPUMilli and MemoryMiB are per-member host resources; zero means none.
	CPUMilli  int64 `json:",omitzero"`
	MemoryMiB int64 `json:",omitzero"`
	// GPUModel restricts members to nodes with this GPU model; empty: any.
	// It is the one-model form of GPUModels: with GPUModels empty, a
	// GPUModel of "A" is exactly GPUModels ["A"]. With both set, GPUModels
	// is the allowed set and GPUModel must be one of its models (Validate
	// says so otherwise); callers that read one model (a quota charged to
	// one model's pool, say) keep reading GPUModel.
	GPUModel string `json:",omitzero"`
	// GPUModels is the set of GPU models a member accepts (Kubernetes node
	// affinity "In" over the GPU product label, SLURM --constraint="a|b",
	// openb's gpu_spec "A|B"): each member lands on a node whose model is
	// one of them. Empty: GPUModel decides. The order carries no meaning
	// (no preference), and a model the cluster lacks is simply never
	// matched. Names are not empty and hold no '|'.
	GPUModels []string `json:",omitzero"`
	// SameModel asks that all members of the group land on nodes of one
	// model of the set (SLURM's --constraint="[a|b]"). The default
	// (false) chooses the model per member, as Kubernetes node affinity
	// and SLURM's --constraint="a|b" do: a member's model is simply the
	// model of the node it lands on, so a set never places a gang where
	// a set of one of its models would not. With SameModel the models
	// are tried in the order listed and the first that holds the whole
	// group wins. Unused for sets of one model; a multi-group gang with
	// SameModel over several models is ErrUnsupported.
	SameModel bool `json:",omitzero"`
	// Selector restricts members to nodes carrying all of these labels.
	Selector map[string]string `json:",omitzero"`
}

// Errors returned by Request.Validate, wrapped with details.
var (
	ErrNoGroups     = errors.New("gang: request has no groups")
	ErrBadGroup     = errors.New("gang: invalid group")
	ErrBadTopology  = errors.New("gang: invalid topology constraint")
	ErrUnknownLevel = errors.New("gang: unknown topology level")
)

// FieldError names the field of a request that is invalid.
type FieldError struct {
	Group int    // index of the group, -1 for request-level fields
	Field string // e.g. "Members"
	Err   error  // a sentinel of this package
	Msg   string
}

func (e *FieldError) Error() string {
	if e.Group < 0 {
		return fmt.Sprintf("%v: %s: %s", e.Err, e.Field, e.Msg)
	}
	return fmt.Sprintf("%v: group %d: %s: %s", e.Err, e.Group, e.Field, e.Msg)
}

func (e *FieldError) Unwrap() error { return e.Err }

// Validate checks the request on its own, without a cluster: counts are
// positive, fractional and whole-GPU asks are not mixed. Levels are checked
// against a cluster by Place.
func (r *Request) Validate() error {
	if len(r.Groups) == 0 {
		return &FieldError{Group: -1, Field: "Groups", Err: ErrNoGroups, Msg: "at least one group is needed"}
	}
	if r.Required != "" && r.Required == r.Preferred {
		return &FieldError{Group: -1, Field: "Preferred", Err: ErrBadTopology, Msg: "preferred level equals required level"}
	}
	for i := range r.Groups {
		if err := r.Groups[i].validate(i); err != nil {
			return err
		}
	}
	return nil
}

func (g *Group) validate(i int) error {
	bad := func(field, msg string, args ...any) error {
		return &FieldError{Group: i, Field: field, Err: ErrBadGroup, Msg: fmt.Sprintf(msg, args...)}
	}
	switch {
	case g.Members <= 0:
		return bad("Members", "must be positive, got %d", g.Members)
	case g.GPUsPerMember < 0:
		return bad("GPUsPerMember", "must not be negative, got %d", g.GPUsPerMember)
	case g.GPUMilli < 0 || g.GPUMilli >= 1000:
		return bad("GPUMilli", "must be in 0..999 (use GPUsPerMember for whole GPUs), got %d", g.GPUMilli)
	case g.CPUMilli < 0:
		return bad("CPUMilli", "must not be negative, got %d", g.CPUMilli)
	case g.MemoryMiB < 0:
		return bad("MemoryMiB", "must not be negative, got %d", g.MemoryMiB)
	case g.GPUMemoryMiB < 0 || g.GPUMemoryMiB > 1<<31-1:
		return bad("GPUMemoryMiB", "must be in 0..%d, got %d", 1<<31-1, g.GPUMemoryMiB)
	case g.GPUMemoryMiB > 0 && g.GPUMilli == 0:
		return bad("GPUMemoryMiB", "only for fractional members (GPUMilli)")
	}
	for _, m := range g.GPUModels {
		if m == "" || strings.IndexByte(m, '|') >= 0 {
			return bad("GPUModels", "model names are not empty and hold no '|', got %q", m)
		}
	}
	if g.GPUModel != "" && len(g.GPUModels) > 0 && !slices.Contains(g.GPUModels, g.GPUModel) {
		return bad("GPUModel", "%q is not one of GPUModels %v", g.GPUModel, g.GPUModels)
	}
	kinds := 0
	if g.GPUsPerMember > 0 {
		kinds++
	}
	if g.GPUMilli > 0 {
		kinds++
	}
	if g.MIGProfile != "" {
		kinds++
	}
	if kinds > 1 {
		return bad("GPUsPerMember", "whole GPUs, GPUMilli and MIGProfile are mutually exclusive")
	}
	if kinds == 0 && g.CPUMilli == 0 && g.MemoryMiB == 0 {
		return bad("GPUsPerMember", "member asks for nothing")
	}
	return nil
}

// GPUs is the number of whole GPUs the request asks for (fractional members
// not counted).
func (r *Request) GPUs() int {
	n := 0
	for i := range r.Groups {
		n += r.Groups[i].Members * r.Groups[i].GPUsPerMember
	}
	return n
}

// Models returns the GPU models a member of g accepts: GPUModels when it is
// set, else GPUModel as a set of one, else nil (any model). The slice may
// be g's own: read only.
func (g *Group) Models() []string {
	if len(g.GPUModels) > 0 {
		return g.GPUModels
	}
	if g.GPUModel != "" {
		return []string{g.GPUModel}
	}
	return nil
}

// ModelSet is the canonical text of a set of GPU models: sorted, without
// duplicates, joined by '|' ("A100-40GB|A100-80GB"); "" for none (any
// model). It is how Shape.Model names a set, and a key for equal sets.
func ModelSet(models []string) string {
	switch len(models) {
	case 0:
		return ""
	case 1:
		return models[0]
	}
	s := slices.Clone(models)
	slices.Sort(s)
	return strings.Join(slices.Compact(s), "|")
}

// modelsText names a set ("A|B") for reasons: "{A, B}".
func modelsText(set string) string {
	return "{" + strings.ReplaceAll(set, "|", ", ") + "}"
}
