package slurm

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/berthsched/berth/backends"
)

// bindWindow is how long the first bind of a batch waits for others.
const bindWindow = 3 * time.Millisecond

// bindReq is one job's scontrol update, waiting for its batch.
type bindReq struct {
	id      string // berth's job ID
	job     string // SLURM's
	nodes   []string
	exclude string   // the ExcNodeList it sets ("": it sets NodeList)
	args    []string // scontrol arguments: update JobId=... (validated)
	done    chan error
}

// bind runs req's update, batched with the binds that arrive within
// bindWindow: one scontrol process reads them all from its standard input
// (starting scontrol costs about as much as the update itself, and the
// Runner binds a cycle's gangs in parallel). The first caller of a batch
// runs it; the others wait for its answer, whatever their ctx says: a bind
// that was applied must not be reported failed.
func (b *Backend) bind(ctx context.Context, req *bindReq) error {
	b.bmu.Lock()
	b.batch = append(b.batch, req)
	lead := !b.leading
	b.leading = true
	b.bmu.Unlock()
	if lead {
		time.Sleep(bindWindow)
		b.bmu.Lock()
		batch := b.batch
		b.batch, b.leading = nil, false
		b.bmu.Unlock()
		b.runBatch(context.WithoutCancel(ctx), batch)
	}
	return <-req.done
}

// runBatch applies a batch and answers each request. When scontrol
// reports a failure (it does not say which line failed), squeue tells
// which jobs moved with their node lists: those succeeded; a job moved
// without its node list is moved back (SLURM could start it anywhere);
// the others are run one by one for their own answer.
func (b *Backend) runBatch(ctx context.Context, batch []*bindReq) {
	b.mu.Lock()
	b.stats.Batches++
	b.mu.Unlock()
	var in strings.Builder
	for _, r := range batch {
		in.WriteString(strings.Join(r.args, " "))
		in.WriteByte('\n')
	}
	start := time.Now()
	_, err := b.cli.runInput(ctx, in.String(), "scontrol")
	b.mu.Lock()
	b.stats.BatchTime += time.Since(start)
	if err != nil {
		b.stats.BatchFails++
	}
	b.mu.Unlock()
	if err == nil {
		for _, r := range batch {
			r.done <- nil
		}
		return
	}
	ids := make([]string, len(batch))
	for i, r := range batch {
		ids[i] = r.job
	}
	out, qerr := b.cli.run(ctx, "squeue", "-h", "-t", "all", "-j", strings.Join(ids, ","), "-o", "%i|%P|%n|%x")
	if qerr != nil {
		// Cannot tell: a transient error for all; a retry of an applied
		// bind is refused ("not pending") only if it started, and then
		// the poller reports it running.
		for _, r := range batch {
			r.done <- fmt.Errorf("slurm: batch bind: %w (and squeue: %v)", err, qerr)
		}
		return
	}
	state := map[string][3]string{}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Split(strings.TrimSpace(line), "|")
		if len(f) == 4 {
			state[f[0]] = [3]string{f[1], f[2], f[3]}
		}
	}
	for _, r := range batch {
		st, ok := state[r.job]
		placed := sameNodes(st[1], r.nodes)
		if r.exclude != "" {
			placed = st[1] == "" && sameHostlist(st[2], r.exclude)
		}
		switch {
		case ok && st[0] == b.cfg.RunPartition && placed:
			r.done <- nil
		case ok && st[0] == b.cfg.RunPartition:
			merr := b.moveBack(ctx, r.job, fromPartitionOf(b, r.id))
			r.done <- fmt.Errorf("%w: job %s moved without its node list (%v); moved back: %v", backends.ErrRefused, r.job, err, merr)
		default:
			_, e := b.cli.run(ctx, "scontrol", r.args...)
			r.done <- refusal(e)
		}
	}
}

func fromPartitionOf(b *Backend, job string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if t := b.jobs[job]; t != nil {
		return t.partition
	}
	return fromPartition("", b.cfg)
}

// sameNodes compares a hostlist with a list of names.
func sameNodes(hostlist string, nodes []string) bool {
	got, err := expandHostlist(strings.TrimSpace(hostlist))
	if err != nil {
		return false
	}
	want := slices.Clone(nodes)
	slices.Sort(got)
	slices.Sort(want)
	return slices.Equal(got, want)
}

// setRunNodesLocked keeps the nodes that sinfo shows in RunPartition: a
// bind excludes all of them but its own (excludeFor). b.mu is held.
func (b *Backend) setRunNodesLocked(nodes []nodeRec) {
	var run []string
	for _, n := range nodes {
		if slices.Contains(n.Partitions, b.cfg.RunPartition) && !slices.Contains(run, n.Name) {
			run = append(run, n.Name)
		}
	}
	slices.Sort(run)
	b.runNodes = run
}

// maxExcludeLen bounds an ExcNodeList argument (scontrol reads its
// standard input a line at a time); a longer one binds by NodeList.
const maxExcludeLen = 2000

// excludeFor returns the ExcNodeList that leaves a job exactly nodes:
// every node of RunPartition but those, as a compressed hostlist; "" when
// it cannot (a node not in RunPartition as sinfo last showed it, no node
// to exclude, a list too long): the bind then names NodeList. b.mu is held.
//
// Why not NodeList always: scontrol loads the job (REQUEST_FED_INFO and
// REQUEST_JOB_INFO_SINGLE) before an update that names NodeList or
// ReqNodeList, three RPCs a bind; one that names ExcNodeList is one RPC,
// and a batch of binds takes a third of the time (docs/backends/slurm.md).
// With the node count of the job equal to len(nodes) (BindGang checks),
// SLURM can start it only on exactly those nodes.
func (b *Backend) excludeFor(nodes []string) string {
	if len(b.runNodes) == 0 {
		return ""
	}
	var exc []string
	for _, n := range nodes {
		if _, ok := slices.BinarySearch(b.runNodes, n); !ok {
			return ""
		}
	}
	for _, n := range b.runNodes {
		if !slices.Contains(nodes, n) {
			exc = append(exc, n)
		}
	}
	if len(exc) == 0 {
		return ""
	}
	s := compressHostlist(exc)
	if len(s) > maxExcludeLen {
		return ""
	}
	return s
}

// compressHostlist writes names as a SLURM hostlist: names that differ
// only in a number of the same width at their end share a bracket
// ("node[01-03,07]"); others are listed as they are.
func compressHostlist(names []string) string {
	type key struct {
		prefix string
		width  int
	}
	groups := map[key][]int{}
	var order []key
	var plain []string
	for _, n := range names {
		i := len(n)
		for i > 0 && n[i-1] >= '0' && n[i-1] <= '9' {
			i--
		}
		num, err := strconv.Atoi(n[i:])
		if i == len(n) || len(n)-i > 9 || err != nil {
			plain = append(plain, n)
			continue
		}
		k := key{n[:i], len(n) - i}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], num)
	}
	parts := plain
	for _, k := range order {
		nums := groups[k]
		slices.Sort(nums)
		nums = slices.Compact(nums)
		var rs []string
		for i := 0; i < len(nums); {
			j := i
			for j+1 < len(nums) && nums[j+1] == nums[j]+1 {
				j++
			}
			r := fmt.Sprintf("%0*d", k.width, nums[i])
			if j > i {
				r += fmt.Sprintf("-%0*d", k.width, nums[j])
			}
			rs = append(rs, r)
			i = j + 1
		}
		if len(nums) == 1 {
			parts = append(parts, k.prefix+rs[0])
		} else {
			parts = append(parts, k.prefix+"["+strings.Join(rs, ",")+"]")
		}
	}
	return strings.Join(parts, ",")
}

// onBoundNodes reports whether a running job's node list is the one its
// bind gave it (t.running). b.mu is held.
func (b *Backend) onBoundNodes(t *tracked, r *jobRec) bool {
	if len(t.running) == 0 || r.Nodes == "" {
		return true
	}
	return sameNodes(r.Nodes, t.running)
}

// requeueMisplaced requeues jobs SLURM started off their bind's nodes.
func (b *Backend) requeueMisplaced(ctx context.Context, ids []string) {
	for _, id := range ids {
		sid := b.slurmID(id)
		if err := checkJobID(sid); err != nil {
			continue
		}
		// Held: SLURM could otherwise start it again in RunPartition
		// once its requeue delay passed, before the hand-back's move.
		if _, err := b.cli.run(ctx, "scontrol", "requeuehold", sid); err != nil {
			b.skip(id, fmt.Errorf("requeueing a job started off its bind's nodes: %w", err))
		}
	}
}

// sameHostlist compares two hostlists by their names.
func sameHostlist(a, b string) bool {
	x, err1 := expandHostlist(strings.TrimSpace(a))
	y, err2 := expandHostlist(strings.TrimSpace(b))
	if err1 != nil || err2 != nil {
		return false
	}
	slices.Sort(x)
	slices.Sort(y)
	return slices.Equal(x, y)
}
