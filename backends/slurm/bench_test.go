package slurm_test

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/berthsched/berth/backends/slurm"
)

// e2eMix is the sbatch arguments of job i of BenchmarkEndToEnd500's 500:
// every 50th a 2-node x 8-GPU gang (10), else every 10th one node x 8 GPUs
// (40), every 10th x 4 GPUs (50), two in 10 x 2 GPUs (100), the rest
// (300) one GPU; each runs `true` with a one-minute limit.
func e2eMix(part string, i int) []string {
	nodes, gpus := 1, 1
	switch {
	case i%50 == 49:
		nodes, gpus = 2, 8
	case i%10 == 9:
		gpus = 8
	case i%10 == 8:
		gpus = 4
	case i%10 == 6, i%10 == 7:
		gpus = 2
	}
	return []string{"-p", part, "-N", fmt.Sprint(nodes), fmt.Sprintf("--gres=gpu:h100:%d", gpus), "-t", "1", "--wrap", "true"}
}

// submitMix submits the 500 jobs of the mix to part, four sbatch at a
// time, and returns their IDs.
func submitMix(tb testing.TB, conf, part string) []string {
	tb.Helper()
	ids := make([]string, 500)
	var wg sync.WaitGroup
	next := make(chan int)
	errs := make(chan error, 4)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				out, err := cmdErr(conf, "sbatch", append([]string{"--parsable", "-o", "/dev/null"}, e2eMix(part, i)...)...)
				if err != nil {
					errs <- fmt.Errorf("sbatch: %v: %s", err, out)
					return
				}
				ids[i] = out
			}
		}()
	}
	for i := range ids {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(tb, err)
	}
	return ids
}

// endWatch observes jobs' ends for BenchmarkEndToEnd500, the same way
// in both phases and without asking slurmctld anything: the lines that
// slurmctld appends to its jobcomp/filetxt log (endLogOf) as each job
// ends, read every 20 ms from where the log was when the watch began. (A squeue every 100 ms, the way before, took slurmctld's job
// lock ten times a second, which delays every job's completion: it slowed
// both phases more than berth's own polls did.) Without an end log it
// falls back to squeue every 100 ms.
// compLineRE is a line of jobcomp/filetxt of a job named wrap.
var compLineRE = regexp.MustCompile(`^JobId=([0-9]+) UserId=\S+ GroupId=\S+ Name=wrap JobState=([A-Z_]+) `)

type endWatch struct {
	path string
	off  int64
	seen map[string]time.Time // when the watch read each job's COMPLETED line
}

func watchEnds(tb testing.TB, conf string) *endWatch {
	w := &endWatch{path: endLogOf(conf), seen: map[string]time.Time{}}
	if w.path == "" {
		tb.Logf("no end log: ends observed by squeue every 100 ms")
		return w
	}
	fi, err := os.Stat(w.path)
	require.NoError(tb, err)
	w.off = fi.Size()
	return w
}

// waitCompleted waits until every job of ids has ended COMPLETED (it
// fails on another end) and returns when it saw the last; then it checks
// with squeue that SLURM shows each COMPLETED.
func waitCompleted(tb testing.TB, conf string, w *endWatch, ids []string) time.Time {
	tb.Helper()
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	var at time.Time
	if w.path == "" {
		waitFor(tb, 10*time.Minute, fmt.Sprintf("%d jobs to complete", len(ids)), func() bool {
			done := 0
			for _, r := range squeueStates(tb, conf) {
				if want[r.id] {
					switch r.state {
					case "COMPLETED":
						done++
					case "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY":
						tb.Fatalf("job %s ended %s", r.id, r.state)
					}
				}
			}
			at = time.Now()
			return done == len(ids)
		})
		return at
	}
	done := map[string]bool{}
	var part string
	end := time.Now().Add(10 * time.Minute)
	for len(done) < len(ids) {
		if time.Now().After(end) {
			tb.Fatalf("timed out after 10m waiting for %d jobs to complete (%d did)", len(ids), len(done))
		}
		time.Sleep(20 * time.Millisecond)
		f, err := os.Open(w.path)
		require.NoError(tb, err)
		buf, err := io.ReadAll(io.NewSectionReader(f, w.off, 1<<30))
		f.Close()
		require.NoError(tb, err)
		at = time.Now()
		w.off += int64(len(buf))
		lines := strings.Split(part+string(buf), "\n")
		part = lines[len(lines)-1]
		for _, line := range lines[:len(lines)-1] {
			// (The benchmark's own jobs, all named wrap.)
			m := compLineRE.FindStringSubmatch(line)
			if m == nil || !want[m[1]] {
				continue
			}
			switch m[2] {
			case "COMPLETED":
				done[m[1]] = true
				w.seen[m[1]] = at
			case "PENDING", "RESIZING": // requeued (it ends again later), resized
				delete(done, m[1])
			default:
				tb.Fatalf("job %s ended %s", m[1], m[2])
			}
		}
	}
	// (slurmctld logs a job as it ends, COMPLETING: not timed.)
	waitFor(tb, time.Minute, "squeue to show the jobs COMPLETED", func() bool {
		for _, r := range squeueStates(tb, conf) {
			if want[r.id] && r.state != "COMPLETED" {
				if r.state != "COMPLETING" {
					tb.Fatalf("job %s: the end log says COMPLETED, squeue %s", r.id, r.state)
				}
				return false
			}
		}
		return true
	})
	return at
}

// BenchmarkEndToEnd500: the same 500 pending jobs (e2eMix) run to their
// end (a) by SLURM alone, on its own partition gpu (held DOWN while they
// are submitted, then set UP: the clock runs from UP to the last
// COMPLETED), and (b) through berth: a Runner over the backend, started
// once the jobs wait in the managed partition berth (the clock runs from
// the Runner's start to the last COMPLETED; in both phases a job counts
// once slurmctld logs it COMPLETED in its end log, endWatch). It reports
// jobs/s (berth), sbatch-jobs/s (SLURM alone), their ratio berth/sbatch,
// and p99-cycle-s, the 99th percentile of the Runner's Cycle.Duration.
// Where berth's time goes: to-first-bind-s (the Runner's start to its
// first BindGang: the start-up reads), end-to-finished-s and its p90 (a
// job's COMPLETED line read by the watch to its Finished out of Next),
// the backend's Stats (polls, binds, confirmations of ends).
//
// It takes minutes: hack/test.sh's one-shot benchmark run skips it unless
// BERTH_SLURM_BENCH=1. BERTH_SLURM_BENCH_POLL sets berth's PollInterval
// (default the tests' 200 ms).
func BenchmarkEndToEnd500(b *testing.B) {
	conf := benchConf(b)
	if os.Getenv("BERTH_SLURM_BENCH") != "1" {
		b.Skip("set BERTH_SLURM_BENCH=1 to run (minutes)")
	}
	var berthRate, slurmRate float64
	var durs []time.Duration
	var st slurm.Stats
	var lags []time.Duration // a job's COMPLETED line read -> its Finished out of Next
	var toBind time.Duration // the Runner's start -> its first BindGang
	// CPU seconds spent in each phase by slurmctld, and in the berth phase
	// by this process and the commands it ran (squeue, scontrol).
	var slurmCtld, berthCtld, berthSelf, berthCmds float64
	for i := 0; i < b.N; i++ {
		// (a) SLURM alone.
		reset(b, conf)
		cmd(b, conf, "scontrol", "update", "PartitionName=gpu", "State=DOWN")
		w := watchEnds(b, conf)
		ids := func() []string {
			defer cmd(b, conf, "scontrol", "update", "PartitionName=gpu", "State=UP")
			return submitMix(b, conf, "gpu")
		}()
		start := time.Now() // (the partition is UP)
		ctld0 := daemonCPU(b)
		end := waitCompleted(b, conf, w, ids)
		slurmRate += float64(len(ids)) / end.Sub(start).Seconds()
		slurmCtld += daemonCPU(b) - ctld0

		// (b) berth.
		reset(b, conf)
		ids = submitMix(b, conf, "berth")
		w = watchEnds(b, conf)
		start = time.Now()
		ctld0 = daemonCPU(b)
		self0, kids0 := ownCPU()
		rn := startRunner(b, conf, benchPoll(b))
		end = waitCompleted(b, conf, w, ids)
		rn.stop(b)
		berthRate += float64(len(ids)) / end.Sub(start).Seconds()
		berthCtld += daemonCPU(b) - ctld0
		self1, kids1 := ownCPU()
		berthSelf += self1 - self0
		berthCmds += kids1 - kids0
		rn.mu.Lock()
		durs = append(durs, rn.durs...)
		toBind += rn.firstBind.Sub(start)
		for id, at := range w.seen {
			if f, ok := rn.finishedAt[id]; ok {
				lags = append(lags, f.Sub(at))
			}
		}
		rn.mu.Unlock()
		st = rn.b.Stats()
	}
	slices.Sort(durs)
	n := float64(b.N)
	b.ReportMetric(berthRate/n, "jobs/s")
	b.ReportMetric(slurmRate/n, "sbatch-jobs/s")
	b.ReportMetric(berthRate/slurmRate, "berth/sbatch")
	if len(durs) > 0 {
		b.ReportMetric(durs[len(durs)*99/100].Seconds(), "p99-cycle-s")
		b.ReportMetric(durs[len(durs)/2].Seconds(), "p50-cycle-s")
	}
	b.ReportMetric(toBind.Seconds()/n, "to-first-bind-s")
	b.ReportMetric(slurmCtld/n, "sbatch-ctld-cpu-s")
	b.ReportMetric(berthCtld/n, "ctld-cpu-s")
	b.ReportMetric(berthSelf/n, "berth-cpu-s")
	b.ReportMetric(berthCmds/n, "berth-cmds-cpu-s")
	if len(lags) > 0 {
		slices.Sort(lags)
		var sum time.Duration
		for _, l := range lags {
			sum += l
		}
		b.ReportMetric((sum / time.Duration(len(lags))).Seconds(), "end-to-finished-s")
		b.ReportMetric(lags[len(lags)*9/10].Seconds(), "p90-end-to-finished-s")
	}
	// Where berth's time went (the last run).
	b.ReportMetric(float64(st.PollTime.Milliseconds())/float64(max(st.Polls, 1)), "poll-ms")
	b.ReportMetric(float64(st.Polls), "polls")
	b.ReportMetric(float64(st.JSONReads), "json-reads")
	b.ReportMetric(float64(st.Binds)/float64(max(st.Batches, 1)), "binds/scontrol")
	b.ReportMetric(st.BindTime.Seconds()/float64(max(st.Binds, 1)), "bind-wait-s")
	b.ReportMetric(st.BatchTime.Seconds(), "scontrol-s")
	b.ReportMetric(float64(st.BatchFails), "batch-fails")
	b.ReportMetric(st.PollTime.Seconds(), "poll-s")
	b.ReportMetric(float64(st.Confirms), "confirms")
	b.ReportMetric(float64(st.Confirmed), "confirmed-ends")
	b.ReportMetric(float64(st.ConfirmTime.Milliseconds())/float64(max(st.Confirms, 1)), "confirm-ms")
}

// daemonCPU is the CPU seconds (user and system) slurmctld has used so far,
// from /proc/PID/stat of the test cluster's slurmctld (0 where /proc or
// pgrep is missing: the metric then reads 0).
func daemonCPU(tb testing.TB) float64 {
	tb.Helper()
	out, err := exec.Command("pgrep", "-f", "slurmctld .*"+slurmDir()+"/").Output()
	if err != nil {
		return 0
	}
	pid := strings.Fields(string(out))
	if len(pid) == 0 {
		return 0
	}
	st, err := os.ReadFile("/proc/" + pid[0] + "/stat")
	if err != nil {
		return 0
	}
	// Fields after the command's closing parenthesis: utime and stime are
	// the 12th and 13th (fields 14 and 15 of proc(5)), in clock ticks.
	f := strings.Fields(string(st[strings.LastIndexByte(string(st), ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	s, _ := strconv.ParseFloat(f[12], 64)
	return (u + s) / 100 // USER_HZ is 100 on Linux
}

// ownCPU is the CPU seconds of this process and of its waited-for
// children.
func ownCPU() (self, children float64) {
	var me, kids syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &me)
	_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &kids)
	sec := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return sec(me.Utime) + sec(me.Stime), sec(kids.Utime) + sec(kids.Stime)
}

// benchPoll sets the backend's PollInterval from BERTH_SLURM_BENCH_POLL
// (a duration; unset: the tests' 200 ms).
func benchPoll(tb testing.TB) func(*slurm.Config) {
	v := os.Getenv("BERTH_SLURM_BENCH_POLL")
	if v == "" {
		return nil
	}
	d, err := time.ParseDuration(v)
	require.NoError(tb, err, "BERTH_SLURM_BENCH_POLL")
	tb.Logf("PollInterval %v", d)
	return func(c *slurm.Config) { c.PollInterval = d }
}

// jobStates reads the state and restart count of jobs (squeue -O).
func jobStates(tb testing.TB, conf string, ids ...string) map[string]jobState {
	tb.Helper()
	out, err := cmdErr(conf, "squeue", "-h", "-t", "all", "-j", strings.Join(ids, ","), "-O", "JobID:0|,State:0|,RestartCnt:0")
	res := map[string]jobState{}
	if err != nil {
		return res
	}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Split(strings.TrimSpace(line), "|")
		if len(f) == 3 {
			n, _ := strconv.Atoi(f[2])
			res[f[0]] = jobState{id: f[0], state: f[1], restarts: n}
		}
	}
	return res
}

// BenchmarkPreemption: a 16-node x 8-GPU gang of berth-hi preempts one of
// berth (preemptible, grace period 1 s) that holds the whole cluster:
// seconds from the preemptor's sbatch to the victim requeued (its restart
// count up) and to the preemptor RUNNING, read every 20 ms.
func BenchmarkPreemption(b *testing.B) {
	conf := benchConf(b)
	reset(b, conf)
	rn := startRunner(b, conf, nil)
	defer rn.stop(b)
	var toRequeued, toRunning time.Duration
	for i := 0; i < b.N; i++ {
		low := sbatch(b, conf, "-p", "berth", "-N", "16", "--gres=gpu:h100:8", "-t", "10", "--wrap", "sleep 300")
		waitFor(b, 60*time.Second, "the victim to run", func() bool { return jobStates(b, conf, low)[low].state == "RUNNING" })
		start := time.Now()
		high := sbatch(b, conf, "-p", "berth-hi", "-N", "16", "--gres=gpu:h100:8", "-t", "1", "--wrap", "sleep 1")
		var requeued, running time.Time
		waitFor(b, 60*time.Second, "the victim requeued and the preemptor running", func() bool {
			st := jobStates(b, conf, low, high)
			now := time.Now()
			if requeued.IsZero() && st[low].restarts >= 1 {
				requeued = now
			}
			if hs := st[high].state; running.IsZero() && (hs == "RUNNING" || hs == "COMPLETING" || hs == "COMPLETED") {
				running = now
			}
			return !requeued.IsZero() && !running.IsZero()
		})
		toRequeued += requeued.Sub(start)
		toRunning += running.Sub(start)
		cmd(b, conf, "scancel", low, high)
		waitFor(b, 60*time.Second, "both to end", func() bool {
			st := jobStates(b, conf, low, high)
			return terminalState(st[low].state) && terminalState(st[high].state)
		})
	}
	b.ReportMetric(toRequeued.Seconds()/float64(b.N), "to-requeued-s")
	b.ReportMetric(toRunning.Seconds()/float64(b.N), "to-running-s")
	b.ReportMetric(time.Second.Seconds(), "grace-s")
}

func terminalState(s string) bool {
	switch s {
	case "COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY":
		return true
	}
	return false
}
