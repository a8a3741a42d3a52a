package backends

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
)

// PendingReporter is an optional Inventory method for backends that hold
// pending work themselves (a SLURM queue, Kubernetes pods not yet bound):
// at start the Runner submits the pending jobs the engine does not know
// and drops those the backend no longer has, so that a restart loses no
// work even without a saved state.
type PendingReporter interface {
	// Pending returns the jobs submitted to the backend and not running
	// or ended (a preempted job waiting to run again included), in
	// submission order. The result is owned by the caller; the jobs must
	// not be modified afterwards.
	Pending(ctx context.Context) ([]*queue.Job, error)
}

// StateStore keeps the engine's saved state between runs of a Runner
// (RunnerConfig.Store). FileStore is the embedded default.
type StateStore interface {
	// Load returns the state saved last, or nil and no error when none
	// was ever saved.
	Load(ctx context.Context) (*engine.State, error)
	// Save replaces the saved state with st. It must be atomic: a crash
	// leaves the old state or the new one.
	Save(ctx context.Context, st *engine.State) error
}

// FileStore keeps the state as JSON in one file, written atomically (a
// temporary file in the same directory, fsync, rename, fsync of the
// directory).
type FileStore struct {
	Path string
}

// Load reads the file; a missing file is no state (nil, nil).
func (f FileStore) Load(ctx context.Context) (*engine.State, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(f.Path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("backends: state: %w", err)
	}
	var st engine.State
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("backends: state %s: %w", f.Path, err)
	}
	return &st, nil
}

// Save writes st to a temporary file next to Path, syncs it, renames it
// over Path and syncs the directory.
func (f FileStore) Save(ctx context.Context, st *engine.State) (err error) {
	if err := ctx.Err(); err != nil {
		return err
	}
	if f.Path == "" {
		return fmt.Errorf("%w: FileStore without a Path", ErrInvalidConfig)
	}
	b, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("backends: state: %w", err)
	}
	dir := filepath.Dir(f.Path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(f.Path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("backends: state: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	if _, err = tmp.Write(b); err != nil {
		return fmt.Errorf("backends: state: %w", err)
	}
	if err = tmp.Sync(); err != nil {
		return fmt.Errorf("backends: state: %w", err)
	}
	if err = tmp.Close(); err != nil {
		return fmt.Errorf("backends: state: %w", err)
	}
	if err = os.Rename(tmp.Name(), f.Path); err != nil {
		return fmt.Errorf("backends: state: %w", err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("backends: state: %w", err)
	}
	defer d.Close()
	if err = d.Sync(); err != nil {
		return fmt.Errorf("backends: state: %w", err)
	}
	return nil
}

// DefaultCompactAfter is RunnerConfig.CompactAfter's default: a journal
// of 1,000 records (events and cycles; about 350 KB of JSON) replays in
// well under a second, and compacting it costs one snapshot of the live
// jobs (see docs/reliability.md for the measurements).
const DefaultCompactAfter = 1000

// Reconciled counts what the Runner changed at start to bring a restored
// engine in line with the backend (see Runner.Reconciled).
type Reconciled struct {
	Restored  bool     // the engine was restored from a saved state
	Finished  []string // running in the engine, gone from the backend
	Requeued  []string // running in the engine, pending in the backend
	Adopted   []string // running in the backend, unknown or pending to the engine
	Submitted []string // pending in the backend, unknown to the engine
	Dropped   []string // pending in the engine, unknown to the backend
	// Moved: running in the engine and the backend on other members; the
	// backend's members were adopted.
	Moved []string
	// Stopped: running in the backend but not adoptable (a gang bound in
	// part when berth died); unbound in the backend and submitted again.
	Stopped []string
	// Removed: nodes of the restored engine the backend no longer lists
	// (failed in the engine).
	Removed []string
	Nodes   int // node events stepped (added, changed)
}

// build makes the engine: restored from the store when it holds a state,
// else new (with its journal on when there is a store); then reconciled
// with the backend's inventory. A state that does not match the backend
// (see StateMismatchError) is an error before anything is stepped.
func (r *Runner) build(ctx context.Context, ecfg engine.Config, spec topo.Spec, running []RunningJob) (*engine.Engine, error) {
	var st *engine.State
	if r.cfg.Store != nil {
		var err error
		if st, err = r.cfg.Store.Load(ctx); err != nil {
			return nil, err
		}
	}
	var eng *engine.Engine
	var err error
	if st != nil {
		if err := checkState(st); err != nil {
			return nil, err
		}
		eng, err = engine.Restore(ecfg, st)
		if err == nil {
			if m := checkTopology(eng.Cluster(), spec); m != nil {
				return nil, m
			}
		}
	} else {
		ecfg.Cluster = spec
		eng, err = engine.New(ecfg)
		if err == nil && r.cfg.Store != nil {
			err = eng.EnableJournal()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrEngine, err)
	}
	r.eng.Store(eng)
	r.rec.Restored = st != nil
	if r.jobRecs != nil && st != nil {
		r.jobRecs.seed(eng, st)
	}
	var pending []*queue.Job
	pr, hasPending := r.cfg.Backend.(PendingReporter)
	if hasPending {
		if err := r.call(ctx, func(ctx context.Context) (err error) { pending, err = pr.Pending(ctx); return err }); err != nil {
			return nil, fmt.Errorf("backends: inventory: %w", err)
		}
	}
	if err := r.reconcile(ctx, eng, spec, running, pending, hasPending, st != nil); err != nil {
		return nil, err
	}
	if t, ok := eng.BindRetryAt(); ok {
		r.addWake(t) // a restored job waiting for its bind backoff
	}
	return eng, nil
}

// reconcile brings the engine in line with the backend: nodes (restored
// engines only; see reconcileNodes), running jobs (see reconcileRunning),
// pending jobs (when the backend reports them).
func (r *Runner) reconcile(ctx context.Context, eng *engine.Engine, spec topo.Spec, running []RunningJob, pending []*queue.Job, hasPending, restored bool) error {
	now := r.clock.Now()
	if now.Before(eng.Now()) {
		now = eng.Now()
	}
	if restored {
		if err := r.reconcileNodes(eng, spec, now); err != nil {
			return err
		}
	}
	engPending, engActive := eng.JobIDs()
	isPending := setOf(engPending)
	isActive := setOf(engActive)
	runs := map[string]bool{}
	for _, rj := range running {
		runs[rj.Job.ID] = true
	}
	waits := map[string]*queue.Job{}
	for _, j := range pending {
		waits[j.ID] = j
	}
	stopping := map[string]bool{}
	deadline := map[string]time.Time{}
	if v := eng.View(); v != nil {
		for _, rj := range v.Running() {
			if rj.Stopping {
				stopping[rj.Job] = true
				deadline[rj.Job] = rj.Deadline
				r.addWake(rj.Deadline)
			}
		}
	}
	// Preemptions saved assumed or unknown (the Runner stopped before
	// their outcome): a victim the backend no longer runs is gone (the
	// preemption was applied: requeued at its deadline, below); one it
	// runs was not stopped (or not yet): it runs on, and the preemptor,
	// if still blocked, preempts again.
	for _, id := range engActive {
		run, _, ok := eng.PreemptState(id)
		if !ok {
			continue
		}
		ev := engine.PreemptApplied(now, id, run)
		if runs[id] {
			ev = engine.PreemptFailed(now, id, run, "the Runner restarted before the preemption's outcome, and the backend runs the victim")
			delete(stopping, id)
			delete(deadline, id)
		}
		if err := r.step(eng, ev); err != nil {
			return err
		}
	}
	for _, id := range engActive {
		if runs[id] {
			continue
		}
		if run, _, binding := eng.Binding(id); binding && (!hasPending || waits[id] != nil) {
			// Saved while its bind was assumed or unknown, and the backend
			// does not run it: the bind was not applied (or not yet: a
			// late one is a ghost the sweep stops), or it was and the job
			// ended. A backend that reports its pending jobs tells which:
			// one it lists as pending is not finished, one it lists
			// nowhere ran and ended (below, as any job gone while no
			// Runner ran). One that does not report them cannot tell: the
			// job is not counted finished on a guess; the bind is
			// withdrawn (no try counted), its GPUs freed before any
			// adoption, and the job is pending again (an ended job is
			// then dropped by the backend's own Cancelled, or refused).
			if err := r.step(eng, engine.BindFailed(now, id, run, "")); err != nil {
				return err
			}
			continue
		}
		switch j := waits[id]; {
		case stopping[id]:
			// Preempted: the engine requeues it at its deadline.
		case j != nil:
			if err := r.step(eng, engine.Cancelled(now, id)); err != nil {
				return err
			}
			if err := r.step(eng, engine.Submitted(now, j)); err != nil {
				return err
			}
			r.rec.Requeued = append(r.rec.Requeued, id)
		default:
			if err := r.step(eng, engine.Finished(now, id)); err != nil {
				return err
			}
			r.rec.Finished = append(r.rec.Finished, id)
		}
	}
	// Jobs running in the engine on other members than the backend's are
	// all cancelled in the engine before any is adopted: a job's new
	// members may be GPUs the engine still books for another job that
	// moved too (two jobs whose GPUs swapped, with a backend that names a
	// node's devices anew when it restarts), and its adoption would fail.
	moved := map[string]bool{}
	for _, rj := range running {
		id := rj.Job.ID
		if !isActive[id] || !deadline[id].IsZero() {
			continue
		}
		if ms, ok := eng.Members(id); ok && sameMembers(ms, rj.Members) {
			continue
		}
		if err := r.step(eng, engine.Cancelled(now, id)); err != nil {
			return err
		}
		moved[id] = true
		r.rec.Moved = append(r.rec.Moved, id)
	}
	for _, rj := range running {
		id := rj.Job.ID
		if err := r.reconcileRunning(ctx, eng, rj, isActive[id] && !moved[id], isPending[id], moved[id], deadline[id], now); err != nil {
			return err
		}
	}
	if !hasPending {
		return nil
	}
	for _, id := range engPending {
		if waits[id] == nil && !runs[id] {
			if err := r.step(eng, engine.Cancelled(now, id)); err != nil {
				return err
			}
			r.rec.Dropped = append(r.rec.Dropped, id)
		}
	}
	for _, j := range pending {
		if !isPending[j.ID] && !isActive[j.ID] && !runs[j.ID] {
			if err := r.step(eng, engine.Submitted(now, j)); err != nil {
				return err
			}
			r.rec.Submitted = append(r.rec.Submitted, j.ID)
		}
	}
	return nil
}

func setOf(ids []string) map[string]bool {
	m := make(map[string]bool, len(ids))
	for _, id := range ids {
		m[id] = true
	}
	return m
}

// Reconciled reports what Run changed at start to bring the engine in
// line with the backend. Valid once Run has built the engine (View is not
// nil); read it from Run's goroutine or after Run returned.
func (r *Runner) Reconciled() Reconciled { return r.rec }

// save saves the engine's state to the store, if there is one.
func (r *Runner) save(ctx context.Context, eng *engine.Engine) error {
	if r.cfg.Store == nil || eng == nil {
		return nil
	}
	st, err := eng.Save()
	if err != nil {
		return err
	}
	if n := r.cfg.CompactAfter; n > 0 && len(st.Records) >= n {
		// Between an Advance and the next Ready (Run saves only there);
		// a refusal keeps the whole journal, which is saved as before.
		if err := eng.Compact(); err != nil {
			r.log.Debug("journal not compacted", "records", len(st.Records), "err", err)
		} else if st, err = eng.Save(); err != nil {
			return err
		}
	}
	r.lastSave = r.clock.Now()
	// Not bounded by CallTimeout: the store is local (a file), and a save
	// of a long history takes longer than a backend call.
	return r.cfg.Store.Save(ctx, st)
}

// maybeSave saves when SaveInterval has passed on the Runner's clock since
// the last save; a failure is reported with the next cycle's errors.
func (r *Runner) maybeSave(ctx context.Context, eng *engine.Engine) {
	if r.cfg.Store == nil || r.clock.Now().Sub(r.lastSave) < r.cfg.SaveInterval {
		return
	}
	if err := r.save(ctx, eng); err != nil {
		r.saveErrs = append(r.saveErrs, err)
	}
}
