package federation

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/topo"
)

// Owner returns the pool that owns host now, and whether a move of it is
// in progress.
func (f *Federation) Owner(host string) (pool string, moving bool, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	h := f.hosts[host]
	if h == nil {
		return "", false, false
	}
	return h.owner, h.moving, true
}

// Owners returns every host's owner.
func (f *Federation) Owners() map[string]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]string, len(f.hosts))
	for n, h := range f.hosts {
		out[n] = h.owner
	}
	return out
}

// Moves returns the moves tried so far, in order.
func (f *Federation) Moves() []MoveRecord {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.moves)
}

// MoveNode hands host from its owner to pool to, enforcing ownership in
// both systems. The steps, each after the previous one succeeded:
//
//  1. mark the host moving (the federation refuses binds on it);
//  2. lend it in the owner's system (drain / cordon) and report the
//     owner's copy cordoned;
//  3. wait until it is empty there (at most DrainTimeout);
//  4. reclaim it in to's system (undrain / uncordon); to owns it and its
//     copy is reported ready.
//
// A failure at 2, 3 or 4 is rolled back: to's copy is lent again (if 4
// failed after a partial change), the owner's is reclaimed and stays the
// owner, and the error wraps ErrMove (ErrDrainTimeout for 3). At no point
// are both copies schedulable: to's copy is only reclaimed once the
// owner's system reports its own unschedulable. The move is logged with
// reason.
func (f *Federation) MoveNode(ctx context.Context, host, to, reason string) error {
	return f.move(ctx, host, to, reason, false)
}

// Reclaim is MoveNode for a pool taking a node back (the rebalancer's
// drain moves use it): with Config.PreemptOnReclaim, once the node is lent
// in its owner's system the jobs running on it there are requeued through
// the owner's Requeuer (they go back to their queue in that system and
// start again elsewhere), so that the move does not wait for them to end.
// Without PreemptOnReclaim, or when the owner's member is not a Requeuer,
// it waits for them as MoveNode does. A failed requeue rolls the move
// back (ErrMove).
func (f *Federation) Reclaim(ctx context.Context, host, to, reason string) error {
	return f.move(ctx, host, to, reason, f.cfg.PreemptOnReclaim)
}

func (f *Federation) move(ctx context.Context, host, to, reason string, preempt bool) error {
	f.mu.Lock()
	h := f.hosts[host]
	if h == nil {
		f.mu.Unlock()
		return fmt.Errorf("%w: %w: host %s", ErrMove, ErrUnknownNode, host)
	}
	from := h.owner
	if from == to || h.moving || !slices.Contains(h.pools, to) {
		f.mu.Unlock()
		return fmt.Errorf("%w: host %s: owner %s, moving %v, cannot go to %s (pools %v)", ErrMove, host, from, h.moving, to, h.pools)
	}
	src, dst := f.byName[from], f.byName[to]
	if src.lender == nil || dst.lender == nil {
		f.mu.Unlock()
		return fmt.Errorf("%w: %w: %s -> %s", ErrMove, ErrNoLender, from, to)
	}
	h.moving, h.movingTo = true, to
	f.mu.Unlock()

	mv := Move{Host: host, From: from, To: to, Reason: reason}
	log := f.cfg.Logger.With("host", host, "from", from, "to", to, "reason", reason)
	var preempted []string
	finish := func(owner string, err error) error {
		f.mu.Lock()
		h.moving, h.movingTo = false, ""
		h.owner = owner
		if err == nil {
			h.lastMove = f.cfg.Clock.Now()
		}
		f.moves = append(f.moves, MoveRecord{Move: mv, At: f.cfg.Clock.Now(), Err: err, Preempted: preempted})
		f.mu.Unlock()
		if err != nil {
			log.Warn("federation: node move failed", "err", err)
		} else {
			log.Info("federation: node moved")
		}
		return err
	}
	rollbackSrc := func(cause error) error {
		if err := f.change(h, func() error { return src.lender.ReclaimNode(ctx, host) }); err != nil {
			// The node stays unschedulable everywhere: safe, but lost
			// until the next move or an operator.
			f.nodeEvent(from, host, topo.Cordoned)
			return finish(from, fmt.Errorf("%w: %w; rollback: reclaim in %s: %w", ErrMove, cause, from, err))
		}
		err := finish(from, fmt.Errorf("%w: %w (rolled back)", ErrMove, cause))
		f.nodeEvent(from, host, topo.Ready) // after the books say so
		return err
	}
	// 2. Lend in the owner's system.
	if err := f.change(h, func() error { return src.lender.LendNode(ctx, host) }); err != nil {
		return rollbackSrc(fmt.Errorf("lend in %s: %w", from, err))
	}
	f.nodeEvent(from, host, topo.Cordoned)
	// 2b. With the preemption policy, requeue what runs there.
	if rq, ok := src.Backend.(Requeuer); ok && preempt {
		f.mu.Lock()
		jobs := slices.Sorted(maps.Keys(h.jobs))
		f.mu.Unlock()
		for _, j := range jobs {
			if err := rq.RequeueJob(ctx, j); err != nil {
				return rollbackSrc(fmt.Errorf("requeue job %s in %s: %w", j, from, err))
			}
			preempted = append(preempted, j)
			log.Info("federation: job requeued to empty a reclaimed node", "job", j)
		}
	}
	// 3. Wait until it is unschedulable and empty there.
	tries := int(f.cfg.DrainTimeout / f.cfg.PollInterval)
	for i := 0; ; i++ {
		st, err := src.lender.NodeStatus(ctx, host)
		if err != nil {
			return rollbackSrc(fmt.Errorf("status in %s: %w", from, err))
		}
		if !st.Schedulable && !st.Busy {
			break
		}
		if i >= tries {
			return rollbackSrc(fmt.Errorf("%w: %s still busy (schedulable %v) after %v", ErrDrainTimeout, from, st.Schedulable, f.cfg.DrainTimeout))
		}
		if err := f.cfg.Clock.Sleep(ctx, f.cfg.PollInterval); err != nil {
			return rollbackSrc(err)
		}
	}
	// 4. Reclaim in the new owner's system.
	if err := f.change(h, func() error { return dst.lender.ReclaimNode(ctx, host) }); err != nil {
		// It may have become schedulable before failing: lend it again
		// before the old owner takes it back.
		if lerr := f.change(h, func() error { return dst.lender.LendNode(ctx, host) }); lerr != nil {
			f.nodeEvent(from, host, topo.Cordoned)
			return finish(from, fmt.Errorf("%w: reclaim in %s: %w; re-lend there failed too (%w): node left unschedulable in %s", ErrMove, to, err, lerr, from))
		}
		return rollbackSrc(fmt.Errorf("reclaim in %s: %w", to, err))
	}
	err := finish(to, nil)
	f.nodeEvent(to, host, topo.Ready) // after the books say so
	return err
}

// change runs one lender call that may change h's state in a system,
// counting it in h.gen before and after (CheckExclusive retries a host
// whose state changed while it read it).
func (f *Federation) change(h *host, call func() error) error {
	f.mu.Lock()
	h.gen++
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		h.gen++
		f.mu.Unlock()
	}()
	return call()
}

// PlanRound gathers the federation's view (hosts with their owners and
// jobs, pending demand by pool, plus Config.Demand) and returns the moves
// Plan decides at now.
func (f *Federation) PlanRound(now time.Time) []Move {
	out, _ := f.planRound(now)
	return out
}

// planRound is PlanRound, with the rule that decided each move.
func (f *Federation) planRound(now time.Time) ([]Move, []moveKind) {
	pools, hosts := f.view()
	return plan(now, f.cfg.Rebalance, pools, hosts)
}

// view gathers the federation's books for Plan: each pool's demand
// (pending jobs, plus Config.Demand) and every shared host.
func (f *Federation) view() ([]PoolDemand, []HostView) {
	var extra map[string]PoolDemand
	if f.cfg.Demand != nil {
		extra = f.cfg.Demand()
	}
	f.mu.Lock()
	pools := make([]PoolDemand, len(f.members))
	for i, m := range f.members {
		pools[i] = PoolDemand{Pool: m.Name, Quota: m.Quota}
		if e, ok := extra[m.Name]; ok {
			pools[i].PendingGPUHours += e.PendingGPUHours
			pools[i].ReservedGPUs += e.ReservedGPUs
		}
	}
	for _, p := range f.pending {
		if i := slices.IndexFunc(pools, func(d PoolDemand) bool { return d.Pool == p.pool }); i >= 0 {
			pools[i].PendingGPUHours += p.gpuHours
		}
	}
	hosts := make([]HostView, 0, len(f.hosts))
	for _, h := range f.hosts {
		if len(h.pools) < 2 {
			continue
		}
		hosts = append(hosts, HostView{Host: h.name, Owner: h.owner, Pools: slices.Clone(h.pools), GPUs: h.gpus,
			Busy: len(h.jobs) > 0, LastMove: h.lastMove, MovingTo: h.movingTo})
	}
	f.mu.Unlock()
	return pools, hosts
}

// Rebalance runs one round: it plans at the clock's now and applies the
// moves of idle nodes one by one. It returns those that were done, and the
// errors of those that failed (each rolled back). Drain moves (busy nodes
// a pool under its quota reclaims) run in the background: the node is
// lent at once and moves when its jobs end, or the move is rolled back
// after DrainTimeout; Wait waits for them.
func (f *Federation) Rebalance(ctx context.Context) ([]Move, error) {
	return f.apply(ctx, f.PlanRound(f.cfg.Clock.Now()))
}

// apply applies one round's moves (see Rebalance).
func (f *Federation) apply(ctx context.Context, moves []Move) ([]Move, error) {
	var done []Move
	var errs []error
	for _, mv := range moves {
		if mv.Drain {
			f.wg.Add(1)
			go func() {
				defer f.wg.Done()
				_ = f.Reclaim(ctx, mv.Host, mv.To, mv.Reason) // logged and recorded
			}()
			continue
		}
		if err := f.MoveNode(ctx, mv.Host, mv.To, mv.Reason); err != nil {
			errs = append(errs, err)
			continue
		}
		done = append(done, mv)
	}
	return done, errors.Join(errs...)
}

// Wait waits for the drain moves Rebalance started.
func (f *Federation) Wait() { f.wg.Wait() }

// RunRebalancer runs Rebalance every Rebalance.Interval on the clock until
// ctx is done, and early when a pool is short: every
// Rebalance.EarlyInterval in between it plans a round, and applies it at
// once when the plan lends an idle node to a pool that wants one (a
// reclaim or demand move; see RebalanceConfig.EarlyInterval). An early
// round does not move the periodic ones. Failed moves are logged (and
// rolled back), not fatal. While it runs, Observe tells pending jobs when
// the next round is.
func (f *Federation) RunRebalancer(ctx context.Context) error {
	defer f.Wait()
	defer f.schedule(time.Time{}, time.Time{})
	rc := f.cfg.Rebalance
	now := f.cfg.Clock.Now()
	next := now.Add(rc.Interval)
	for {
		wake := next
		if rc.EarlyInterval > 0 && now.Add(rc.EarlyInterval).Before(next) {
			wake = now.Add(rc.EarlyInterval)
		}
		f.schedule(wake, next)
		if err := f.cfg.Clock.Sleep(ctx, max(0, wake.Sub(now))); err != nil {
			return err
		}
		now = f.cfg.Clock.Now()
		moves, kinds := f.planRound(now)
		if now.Before(next) {
			short := shortPools(moves, kinds)
			if len(short) == 0 {
				continue
			}
			f.cfg.Logger.Info("federation: early rebalance: a pool is short", "pools", slices.Sorted(maps.Keys(short)),
				"next_round", next)
		} else {
			next = now.Add(rc.Interval)
		}
		if _, err := f.apply(ctx, moves); err != nil {
			f.cfg.Logger.Warn("federation: rebalance round", "err", err)
		}
		now = f.cfg.Clock.Now()
	}
}

// schedule records when RunRebalancer looks next (check: an early round
// if a pool is short then) and when its next periodic round is; zero:
// it does not run.
func (f *Federation) schedule(check, round time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nextCheck, f.nextRound = check, round
}

// CheckExclusive asks every pool's lender about every shared host and
// returns an error naming each host schedulable in more than one system
// at once, or schedulable in a pool that does not own it (while no move of
// it is in progress). It is the invariant the federation keeps; tests call
// it after every step, and may call it while moves run: a host whose state
// the federation changed while its systems were being read is read again
// (up to three times, then skipped), so that two reads a move apart are
// not taken for one instant.
func (f *Federation) CheckExclusive(ctx context.Context) error {
	f.mu.Lock()
	var hs []*host
	for _, h := range f.hosts {
		if len(h.pools) > 1 {
			hs = append(hs, h)
		}
	}
	f.mu.Unlock()
	slices.SortFunc(hs, func(a, b *host) int { return cmp.Compare(a.name, b.name) })
	var errs []error
	for _, h := range hs {
		for range 3 {
			f.mu.Lock()
			gen, owner, moving := h.gen, h.owner, h.moving
			f.mu.Unlock()
			sched, err := f.schedulable(ctx, h)
			f.mu.Lock()
			stable := gen == h.gen && owner == h.owner && moving == h.moving
			f.mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				break
			}
			if !stable {
				continue
			}
			if len(sched) > 1 {
				errs = append(errs, fmt.Errorf("host %s schedulable in %v at once", h.name, sched))
			}
			if len(sched) == 1 && sched[0] != owner && !moving {
				errs = append(errs, fmt.Errorf("host %s schedulable in %s but owned by %s", h.name, sched[0], owner))
			}
			break
		}
	}
	return errors.Join(errs...)
}

// schedulable returns the pools whose system reports h schedulable.
func (f *Federation) schedulable(ctx context.Context, h *host) ([]string, error) {
	var sched []string
	for _, p := range h.pools {
		l := f.byName[p].lender
		if l == nil {
			continue
		}
		st, err := l.NodeStatus(ctx, h.name)
		if err != nil {
			return nil, fmt.Errorf("host %s: status in %s: %w", h.name, p, err)
		}
		if st.Schedulable {
			sched = append(sched, p)
		}
	}
	return sched, nil
}

// ReservedDemand turns the reservations of an engine View (a Runner's
// View) into demand by pool: the GPUs held for reserved starts due before
// now+within, counted for the pool of the reserved job. Use it as
// Config.Demand:
//
//	Demand: func() map[string]federation.PoolDemand {
//		return fed.ReservedDemand(runner.View(), time.Now(), 15*time.Minute)
//	}
//
// A nil View gives nil.
func (f *Federation) ReservedDemand(v *engine.View, now time.Time, within time.Duration) map[string]PoolDemand {
	if v == nil {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]PoolDemand{}
	for _, r := range v.Reservations {
		p, ok := f.jobPool[r.Job]
		if !ok || r.GPUs == nil || !r.Start.Before(now.Add(within)) {
			continue
		}
		d := out[p]
		d.Pool = p
		d.ReservedGPUs += float64(r.GPUs.GetCardinality())
		out[p] = d
	}
	return out
}
