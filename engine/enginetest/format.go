package enginetest

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/RoaringBitmap/roaring/v2"

	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/topo"
)

// Format renders a Ready for scenario files.
func Format(e *engine.Engine, rd engine.Ready) string {
	var b strings.Builder
	for _, st := range rd.Stops {
		was := "pending"
		if st.Running {
			was = "running"
		}
		fmt.Fprintf(&b, "stop %s (%v, was %s)\n", st.Job, st.Cause, was)
	}
	for _, p := range rd.Preemptions {
		fmt.Fprintf(&b, "preempt %s for %s (%v) deadline %s cost %.0f GPU-s\n", p.Victim, p.For, p.Cause, rel(p.Deadline), p.CostGPUSeconds)
	}
	for _, r := range rd.Resizes {
		fmt.Fprintf(&b, "resize %s to %d members", r.Job, r.Members)
		if len(r.Add) > 0 {
			fmt.Fprintf(&b, " add %s", members(r.Add))
		}
		if len(r.Remove) > 0 {
			fmt.Fprintf(&b, " remove %s", members(r.Remove))
		}
		b.WriteByte('\n')
	}
	for _, bd := range rd.Binds {
		bf := ""
		if bd.Backfill {
			bf = " (backfill)"
		}
		if bd.Partition != "" {
			bf += " [partition " + bd.Partition + "]"
		}
		fmt.Fprintf(&b, "bind %s: %s%s\n", bd.Job, members(bd.Members), bf)
	}
	for _, r := range rd.MIG {
		fmt.Fprintf(&b, "reconfigure %s[%d]: %v -> %v", r.Node, r.GPU, r.From, r.To)
		if len(r.Destroy) > 0 {
			fmt.Fprintf(&b, " destroy %v", r.Destroy)
		}
		if len(r.Create) > 0 {
			fmt.Fprintf(&b, " create %v", r.Create)
		}
		b.WriteByte('\n')
	}
	for _, r := range rd.Reservations {
		kind := "reserve"
		if r.Preemption {
			kind = "hold"
		}
		fmt.Fprintf(&b, "%s %s at %s: %s\n", kind, r.Job, rel(r.Start), gpuSet(e.Cluster(), r.GPUs))
	}
	for _, p := range rd.Pending {
		fmt.Fprintf(&b, "pending %s: %s", p.Job, p.String())
		if h, ok := rd.Holds[p.Job]; ok {
			fmt.Fprintf(&b, ": %s", h)
		}
		if !p.Start.IsZero() {
			fmt.Fprintf(&b, "; start %s", rel(p.Start))
		}
		b.WriteByte('\n')
	}
	if len(rd.Requeued) > 0 {
		fmt.Fprintf(&b, "requeued %s\n", strings.Join(rd.Requeued, ", "))
	}
	for _, f := range rd.Failed {
		if f.Reason != "" {
			fmt.Fprintf(&b, "failed %s: %s\n", f.Job, f.Reason)
			continue
		}
		fmt.Fprintf(&b, "failed %s (node %s)\n", f.Job, f.Node)
	}
	for _, r := range rd.Rejected {
		fmt.Fprintf(&b, "rejected %s: %v\n", r.Job, r.Err)
	}
	if b.Len() == 0 {
		return "nothing to do\n"
	}
	return b.String()
}

// FormatView renders a View.
func FormatView(v *engine.View) string {
	var b strings.Builder
	fmt.Fprintf(&b, "at %s: %d of %d GPUs free\n", rel(v.At), v.FreeGPUs, v.TotalGPUs)
	for _, r := range v.Running() {
		state := "running"
		if r.Stopping {
			state = "stopping until " + rel(r.Deadline)
		}
		fmt.Fprintf(&b, "%s %s: %d GPUs", state, r.Job, r.GPUs)
		if r.Shared > 0 {
			fmt.Fprintf(&b, " + %d shared", r.Shared)
		}
		fmt.Fprintf(&b, " since %s, ends %s", rel(r.Start), rel(r.ExpectedEnd))
		if r.Backfilled {
			b.WriteString(" (backfilled)")
		}
		b.WriteByte('\n')
	}
	for _, p := range v.Pending {
		fmt.Fprintf(&b, "pending %s: %v\n", p.Job, p.Reason)
	}
	for _, q := range v.Queues() {
		fmt.Fprintf(&b, "queue %s: usage %v\n", q.Name, q.Usage)
	}
	return b.String()
}

// rel formats a time relative to T0.
func rel(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return "+" + t.Sub(T0()).String()
}

func ranges(idx []int) string {
	var b strings.Builder
	for i := 0; i < len(idx); {
		j := i
		for j+1 < len(idx) && idx[j+1] == idx[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		if i == j {
			fmt.Fprintf(&b, "%d", idx[i])
		} else {
			fmt.Fprintf(&b, "%d-%d", idx[i], idx[j])
		}
		i = j + 1
	}
	return b.String()
}

// members formats members as node[local GPUs], merged per node; a
// fractional member prints alone with what it holds:
// n0[3]{1g.10gb@6 new} (a MIG instance to create) or n1[0]{share 250m}.
func members(ms []engine.Member) string {
	var nodes []string
	per := map[string][]int{}
	var frac []string
	for _, m := range ms {
		if m.Fractional {
			frac = append(frac, fracMember(m))
			continue
		}
		if _, ok := per[m.Node]; !ok {
			nodes = append(nodes, m.Node)
		}
		per[m.Node] = append(per[m.Node], m.GPUs...)
	}
	parts := make([]string, len(nodes))
	for i, n := range nodes {
		g := per[n]
		slices.Sort(g)
		parts[i] = n + "[" + ranges(g) + "]"
	}
	return strings.Join(append(parts, frac...), " ")
}

func fracMember(m engine.Member) string {
	var what string
	switch {
	case m.Share.ID != 0 && m.Share.Replicas == m.Share.Milli:
		what = fmt.Sprintf("share %dm", m.Share.Milli) // share-free GPUs count thousandths
	case m.Share.ID != 0 && m.Share.Replicas > 0:
		what = fmt.Sprintf("share %dm, %d replicas", m.Share.Milli, m.Share.Replicas)
	case m.Share.ID != 0:
		what = fmt.Sprintf("share %dm, mps %d%% %dMiB", m.Share.Milli, m.Share.ActiveThreadPercent, m.Share.PinnedMemoryMiB)
	default:
		what = m.Instance.String()
		if m.Created {
			what += " new"
		}
	}
	if m.Share.BookedMemoryMiB > 0 {
		what += fmt.Sprintf(", booked %dMiB", m.Share.BookedMemoryMiB)
	}
	return fmt.Sprintf("%s[%d]{%s}", m.Node, m.GPUs[0], what)
}

// gpuSet formats cluster GPU indices as node[local GPUs].
func gpuSet(c *topo.Cluster, b *roaring.Bitmap) string {
	var ms []engine.Member
	var cur *engine.Member
	it := b.Iterator()
	for it.HasNext() {
		g := it.Next()
		id, err := c.NodeOfGPU(g)
		if err != nil {
			return fmt.Sprintf("?%d", g)
		}
		first, _ := c.NodeGPUs(id)
		name := c.NodeName(id)
		if cur == nil || cur.Node != name {
			ms = append(ms, engine.Member{Node: name})
			cur = &ms[len(ms)-1]
		}
		cur.GPUs = append(cur.GPUs, int(g-first))
	}
	return members(ms)
}
