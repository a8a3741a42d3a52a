package slurm

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/berthsched/berth/backends"
)

// bindWindow is how long the first bind of a batch waits for others.
const bindWindow = 3 * time.Millisecond

// bindReq is one job's scontrol update, waiting for its batch.
type bindReq struct {
	id    string // berth's job ID
	job   string // SLURM's
	nodes []string
	args  []string // scontrol arguments: update JobId=... (validated)
	done  chan error
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
	out, qerr := b.cli.run(ctx, "squeue", "-h", "-t", "all", "-j", strings.Join(ids, ","), "-o", "%i|%P|%n")
	if qerr != nil {
		// Cannot tell: a transient error for all; a retry of an applied
		// bind is refused ("not pending") only if it started, and then
		// the poller reports it running.
		for _, r := range batch {
			r.done <- fmt.Errorf("slurm: batch bind: %w (and squeue: %v)", err, qerr)
		}
		return
	}
	state := map[string][2]string{}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Split(strings.TrimSpace(line), "|")
		if len(f) == 3 {
			state[f[0]] = [2]string{f[1], f[2]}
		}
	}
	for _, r := range batch {
		st, ok := state[r.job]
		switch {
		case ok && st[0] == b.cfg.RunPartition && sameNodes(st[1], r.nodes):
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
