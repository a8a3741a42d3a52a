// Package queue holds berth's pending work: the job model, a lock-free
// intake, the quota tree (cohorts, quotas, borrowing and lending), decayed
// usage and fair share, and the policies that order pending jobs.
//
// # Pieces
//
//   - Job: ID, queue, account, priority, class, the placement shape
//     (gang.Request), runtime estimate and limit, preemption facts,
//     elastic bounds, submit time. Job.Validate names the bad field in a
//     *FieldError; Tree.ValidateJob checks the queue and account.
//   - Intake: a bounded lock-free multi-producer ring (Vyukov). Submit from
//     any goroutine; ErrIntakeFull when full, never a silent drop.
//   - Tree: cohorts (nested) and leaf queues with per-resource nominal
//     quota, borrowing and lending limits (Kueue's hierarchical model);
//     Fits / Charge / Release / Lenders / Borrowers; decayed GPU-time of
//     queues and Fair Tree accounts (SLURM's half-life decay). Amounts are
//     saturating (Amount); see ResourceName for units and the GPU model
//     convention.
//   - Pending: the pending jobs, in google/btree sets per queue and per
//     account, ordered by aged priority, submit time, then ID.
//   - Policy: StrictPriority, DRS (Kueue's dominant resource share with
//     weights), FairTree (SLURM), Multifactor (SLURM's weighted factors).
//   - Snapshot: a read-only copy-on-write view for observers.
//
// # The engine's cycle
//
//	rejected := pending.Drain(intake, now)  // intake -> pending, Advance, Publish
//	cur := policy.Order(pending, now)
//	for j, ok := cur.Next(); ok; j, ok = cur.Next() {
//		if fit, _ := tree.Fits(j); !fit.OK { continue } // fit.Resource says why
//		// ... place j with gang.Place; if it is placed:
//		tree.Charge(j, now)
//		pending.Remove(j.ID)
//	}
//	// later: tree.Release(j, end) when j finishes or is preempted.
//
// Fits and Cursor.Next do not allocate once a job is pending; Charge and
// Release only touch a map of charged jobs. For reclaim, Tree.Borrowed, Tree.Borrowers and Tree.Lenders
// say who uses whose quota.
//
// # Concurrency
//
// Intake.Submit (and Len, Cap) may be called from any goroutine, lock-free.
// Pending.Snapshot may be called from any goroutine and returns an
// immutable Snapshot that many readers may share. Everything else (Tree,
// Pending, policies, cursors) belongs to one goroutine, the engine's. The
// package starts no goroutine, reads no clock (time is always passed in)
// and uses no randomness; every order breaks ties on IDs or names, so the
// same calls give the same answers.
package queue
