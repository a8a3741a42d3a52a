// Command slurm-bridge runs berth over the managed partitions of a SLURM
// cluster: users submit with sbatch to a managed partition, berth decides
// where and when each job runs, SLURM runs it. It prints one line per cycle
// that decided something, and stops on SIGINT / SIGTERM (or after -for).
//
// The slurm.conf lines a site needs (see docs/backends/slurm.md):
//
//	TopologyPlugin=topology/tree          # optional: racks and blocks as berth levels
//	PreemptType=preempt/none              # berth preempts, SLURM must not
//	JobRequeue=1                          # preempted jobs are requeued
//	PartitionName=berth     Nodes=gpu[001-128] State=DOWN Default=NO       # managed: queued, never started by SLURM
//	PartitionName=berth-hi  Nodes=gpu[001-128] State=DOWN Default=NO       # managed, higher priority in berth
//	PartitionName=berth-run Nodes=gpu[001-128] State=UP Hidden=YES Default=NO  # where berth starts jobs
//
// On the test cluster of hack/slurm-up.sh:
//
//	bash hack/slurm-up.sh && source /tmp/berth-slurm/env
//	go run ./examples/slurm-bridge -for 30s &
//	sbatch -p berth -A ml -N 2 --gres=gpu:h100:8 -t 10 --comment berth:required=block,preferred=rack --wrap 'sleep 20'
//	scontrol -d show job <id>    # NodeList: the nodes berth chose
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/backends/slurm"
	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/queue"
)

func main() {
	queues := flag.String("queues", "default,ml", "berth queues (SLURM accounts), comma-separated")
	poll := flag.Duration("poll", time.Second, "how often squeue and sinfo are read")
	dur := flag.Duration("for", 0, "stop after this long (0: until a signal)")
	flag.Parse()
	if err := run(strings.Split(*queues, ","), *poll, *dur); err != nil {
		log.Fatal("slurm-bridge: ", err)
	}
}

// clusterName is SLURM's ClusterName, or "" when scontrol does not say.
func clusterName(ctx context.Context) string {
	out, err := exec.CommandContext(ctx, "scontrol", "show", "config").Output()
	if err != nil {
		return ""
	}
	for line := range strings.SplitSeq(string(out), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && strings.TrimSpace(k) == "ClusterName" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func run(queues []string, poll, dur time.Duration) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if dur > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, dur)
		defer cancel()
	}
	parts := map[string]slurm.Partition{
		"berth":    {Priority: 0, Preemptible: true, MinRuntime: time.Minute, GracePeriod: 30 * time.Second},
		"berth-hi": {Priority: 10},
	}
	b, err := slurm.New(slurm.Config{
		Partitions:   parts,
		PollInterval: poll,
		OnSkip:       func(job string, err error) { log.Printf("job %s: %v", job, err) },
	})
	if err != nil {
		return err
	}
	defer b.Close()
	// Say what it manages (the Runner reads the inventory again).
	spec, err := b.Cluster(ctx)
	if err != nil {
		return err
	}
	log.Print(describe(clusterName(ctx), os.Getenv("SLURM_CONF"), spec, parts, queues, poll))
	var qs []queue.QueueSpec
	for _, q := range queues {
		qs = append(qs, queue.QueueSpec{Name: q})
	}
	r, err := backends.NewRunner(backends.RunnerConfig{
		Engine: engine.Config{
			Queues:     queue.TreeSpec{Queues: qs},
			Policy:     queue.StrictPriority(),
			Backfill:   engine.BackfillConfig{Mode: engine.BackfillEASY},
			Preemption: engine.PreemptionConfig{Priority: true},
		},
		Backend:      b,
		TickInterval: 10 * time.Second,
		Parallelism:  256, // the backend batches a cycle's binds into one scontrol
		// A job of an unknown queue, or a report the engine cannot take,
		// is logged and skipped rather than stopping the bridge.
		// A job the engine refuses (an account berth has no queue for) is
		// held in SLURM with the reason (b.StepError); every refusal is
		// also logged in words, naming the job.
		OnStepError: func(ev engine.Event, err error) error {
			log.Print(skipLine(ev, err, queues))
			return b.StepError(ev, err)
		},
		Observe: func(c backends.Cycle) {
			b.ShowReasons(c.Ready.Pending) // berth's reasons in each job's AdminComment
			if len(c.Ready.Binds)+len(c.Ready.Preemptions) == 0 {
				return
			}
			var parts []string
			for _, bd := range c.Ready.Binds {
				var nodes []string
				for _, m := range bd.Members {
					nodes = append(nodes, m.Node)
				}
				parts = append(parts, fmt.Sprintf("bind %s -> %s", bd.Job, strings.Join(nodes, ",")))
			}
			for _, p := range c.Ready.Preemptions {
				parts = append(parts, fmt.Sprintf("preempt %s for %s", p.Victim, p.For))
			}
			log.Printf("cycle %d: %s (refused %v)", c.Ready.Seq, strings.Join(parts, "; "), c.Outcome.RefusedBinds)
		},
	})
	if err != nil {
		return err
	}
	err = r.Run(ctx)
	if ctx.Err() != nil {
		st := b.Stats()
		log.Printf("stopped: %d polls (%v each), %d binds, %d preemptions", st.Polls, st.PollTime/time.Duration(max(st.Polls, 1)), st.Binds, st.Preemptions)
		return nil
	}
	return err
}
