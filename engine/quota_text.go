package engine

import (
	"strconv"
	"strings"

	"github.com/berthsched/berth/queue"
)

// quotaAmount formats an amount of r in the unit a person reads: GPU
// resources (counted in thousandths) as GPUs ("2 GPUs", "0.5 GPUs"), CPU
// as cores, the others as they are counted (MiB, instances).
func quotaAmount(r queue.ResourceName, a queue.Amount) string {
	milli := func(unit string) string {
		neg := a < 0
		v := int64(a)
		if neg {
			v = -v
		}
		s := strconv.FormatInt(v/1000, 10)
		if f := v % 1000; f != 0 {
			s += strings.TrimRight("."+strconv.FormatInt(1000+f, 10)[1:], "0")
		}
		if neg {
			s = "-" + s
		}
		return s + " " + unit
	}
	switch {
	case a == queue.MaxAmount || a == queue.MinAmount:
		return strconv.FormatInt(int64(a), 10)
	case r.IsGPU():
		return milli("GPUs")
	case r == queue.CPUMilli:
		return milli("cores")
	case r == queue.MemoryMiB:
		return strconv.FormatInt(int64(a), 10) + " MiB"
	}
	return strconv.FormatInt(int64(a), 10)
}
