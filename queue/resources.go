package queue

import (
	"math"
	"math/bits"
	"slices"
	"strconv"
	"strings"
)

// Amount is a quantity of one resource. Its unit is set by the resource name
// (see ResourceName). Arithmetic saturates at MaxAmount and MinAmount instead
// of wrapping, in the manner of Kueue's resources.Amount, so that absurd
// inputs produce absurd but ordered answers, never a negative quota.
type Amount int64

// Bounds of Amount.
const (
	MaxAmount Amount = math.MaxInt64
	MinAmount Amount = math.MinInt64
)

// Add returns a+b, saturated.
func (a Amount) Add(b Amount) Amount {
	s := a + b
	switch {
	case b > 0 && s < a:
		return MaxAmount
	case b < 0 && s > a:
		return MinAmount
	}
	return s
}

// Sub returns a-b, saturated.
func (a Amount) Sub(b Amount) Amount {
	s := a - b
	switch {
	case b > 0 && s > a:
		return MinAmount
	case b < 0 && s < a:
		return MaxAmount
	}
	return s
}

// Mul returns a*n, saturated.
func (a Amount) Mul(n int64) Amount {
	if a == 0 || n == 0 {
		return 0
	}
	neg := (a < 0) != (n < 0)
	hi, lo := bits.Mul64(absU(int64(a)), absU(n))
	if hi != 0 || lo > math.MaxInt64 {
		if neg {
			return MinAmount
		}
		return MaxAmount
	}
	if neg {
		return -Amount(lo)
	}
	return Amount(lo)
}

func absU(v int64) uint64 {
	if v < 0 {
		return uint64(-(v + 1)) + 1
	}
	return uint64(v)
}

func minAmount(a, b Amount) Amount {
	if a < b {
		return a
	}
	return b
}

func maxAmount(a, b Amount) Amount {
	if a > b {
		return a
	}
	return b
}

// ResourceName names a resource that quotas govern. The name fixes the unit:
//
//   - GPUMilli ("gpu") and GPUModel(m) ("gpu/<m>") count thousandths of a GPU,
//     so a whole GPU is 1000 and a GPUMilli=250 member is 250;
//   - CPUMilli ("cpu") counts thousandths of a core;
//   - MemoryMiB ("memory") counts MiB;
//   - MIG(p) ("mig/<p>") counts MIG instances of profile p.
//
// GPU model convention: a group with a GPUModel charges GPUModel(model); a
// group without one charges the generic GPUMilli. A set of models
// (gang.Group.GPUModels) charges its one model when it has one, else
// GPUModel when the group names one of the set, else the generic GPUMilli
// (the model is known only once placed). The two are distinct
// resources: a tree that sets quotas per model should require jobs to name a
// model (or also set a generic GPUMilli quota), since a resource that no node
// of the tree gives a quota is not limited at all (see Tree).
type ResourceName string

// Resource names with fixed units.
const (
	GPUMilli  ResourceName = "gpu"
	CPUMilli  ResourceName = "cpu"
	MemoryMiB ResourceName = "memory"
)

// GPUModel names the GPU resource of one model, in thousandths of a GPU. An
// empty model gives the generic GPUMilli.
func GPUModel(model string) ResourceName {
	if model == "" {
		return GPUMilli
	}
	return GPUMilli + "/" + ResourceName(model)
}

// MIG names the resource of MIG instances of one profile (e.g. "1g.10gb"),
// counted in instances.
func MIG(profile string) ResourceName { return "mig/" + ResourceName(profile) }

// WholeGPUs converts whole GPUs to the unit of GPU resources.
func WholeGPUs(n int64) Amount { return Amount(n).Mul(1000) }

// IsGPU reports whether r counts GPUs (generic or of one model).
func (r ResourceName) IsGPU() bool {
	return r == GPUMilli || strings.HasPrefix(string(r), string(GPUMilli)+"/")
}

// gpuMilliWeight is the GPU-time weight, in thousandths of a GPU, of one unit
// of r: 1 for GPU resources, the compute-slice share of a MIG instance
// ("3g.40gb" counts 3/7 of a GPU), 0 otherwise.
func (r ResourceName) gpuMilliWeight() float64 {
	if r.IsGPU() {
		return 1
	}
	p, ok := strings.CutPrefix(string(r), "mig/")
	if !ok {
		return 0
	}
	g, _, ok := strings.Cut(p, "g")
	if !ok {
		return 1000.0 / 7
	}
	n, err := strconv.Atoi(g)
	if err != nil || n <= 0 || n > 7 {
		return 1000.0 / 7
	}
	return float64(n) * 1000 / 7
}

// Quantity is an amount of one named resource.
type Quantity struct {
	Name   ResourceName
	Amount Amount
}

// Resources is a list of quantities sorted by name, names unique. The zero
// value is empty. Methods never modify their receiver.
type Resources []Quantity

// Get returns the amount of name, zero when absent.
func (rs Resources) Get(name ResourceName) Amount {
	i, ok := slices.BinarySearchFunc(rs, name, func(q Quantity, n ResourceName) int {
		return strings.Compare(string(q.Name), string(n))
	})
	if !ok {
		return 0
	}
	return rs[i].Amount
}

// With returns a copy of rs with a added to name (saturating), sorted.
func (rs Resources) With(name ResourceName, a Amount) Resources {
	i, ok := slices.BinarySearchFunc(rs, name, func(q Quantity, n ResourceName) int {
		return strings.Compare(string(q.Name), string(n))
	})
	out := make(Resources, len(rs), len(rs)+1)
	copy(out, rs)
	if ok {
		out[i].Amount = out[i].Amount.Add(a)
		return out
	}
	return slices.Insert(out, i, Quantity{Name: name, Amount: a})
}

// String formats rs as "name=amount,...".
func (rs Resources) String() string {
	var b strings.Builder
	for i, q := range rs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(string(q.Name))
		b.WriteByte('=')
		b.WriteString(strconv.FormatInt(int64(q.Amount), 10))
	}
	return b.String()
}

// add merges a into an unsorted-by-construction builder; the caller sorts.
func (rs *Resources) add(name ResourceName, a Amount) {
	for i := range *rs {
		if (*rs)[i].Name == name {
			(*rs)[i].Amount = (*rs)[i].Amount.Add(a)
			return
		}
	}
	*rs = append(*rs, Quantity{Name: name, Amount: a})
}

// Limit is an optional upper bound on an amount. The zero value is "no
// limit".
type Limit struct {
	amount Amount
	set    bool
}

// NoLimit returns the absent limit (the zero Limit).
func NoLimit() Limit { return Limit{} }

// Cap returns the limit a.
func Cap(a Amount) Limit { return Limit{amount: a, set: true} }

// Get returns the limit and whether there is one.
func (l Limit) Get() (Amount, bool) { return l.amount, l.set }

// String is the amount, or "none".
func (l Limit) String() string {
	if !l.set {
		return "none"
	}
	return strconv.FormatInt(int64(l.amount), 10)
}
