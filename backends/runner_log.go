package backends

import (
	"context"
	"log/slog"
	"slices"

	"github.com/berthsched/berth/engine"
)

// logCycle logs one applied cycle: each decision with its job ID, each
// refusal, each rejected submission, each error no refusal reports.
func (r *Runner) logCycle(ctx context.Context, rd *engine.Ready, out *engine.Outcome, errs []error) {
	l := r.log
	for _, p := range rd.Preemptions {
		if slices.Contains(out.RefusedPreemptions, p.Victim) {
			l.LogAttrs(ctx, slog.LevelWarn, "preemption refused", slog.String("job", p.Victim), slog.String("for", p.For))
			continue
		}
		l.LogAttrs(ctx, slog.LevelInfo, "preempt", slog.String("job", p.Victim), slog.String("for", p.For),
			slog.String("cause", p.Cause.String()), slog.Time("deadline", p.Deadline))
	}
	for _, rs := range rd.Resizes {
		if slices.Contains(out.RefusedResizes, rs.Job) {
			l.LogAttrs(ctx, slog.LevelWarn, "resize refused", slog.String("job", rs.Job))
			continue
		}
		l.LogAttrs(ctx, slog.LevelDebug, "resize", slog.String("job", rs.Job), slog.Int("members", rs.Members))
	}
	for _, b := range rd.Binds {
		if slices.Contains(out.RefusedBinds, b.Job) {
			l.LogAttrs(ctx, slog.LevelWarn, "bind refused", slog.String("job", b.Job), slog.String("queue", b.Queue))
			continue
		}
		if l.Enabled(ctx, slog.LevelDebug) {
			nodes := make([]string, 0, len(b.Members))
			for _, m := range b.Members {
				if len(nodes) == 0 || nodes[len(nodes)-1] != m.Node {
					nodes = append(nodes, m.Node)
				}
			}
			l.LogAttrs(ctx, slog.LevelDebug, "bind", slog.String("job", b.Job), slog.String("queue", b.Queue),
				slog.Int("members", len(b.Members)), slog.Any("nodes", nodes), slog.Bool("backfill", b.Backfill),
				slog.Duration("wait", rd.At.Sub(b.Submit)))
		}
	}
	for _, m := range rd.MIG {
		// Issued (assumed); a failure is logged when it comes back.
		l.LogAttrs(ctx, slog.LevelInfo, "mig reconfiguration", slog.String("node", m.Node), slog.Int("gpu", int(m.GPU)))
	}
	for _, rj := range rd.Rejected {
		l.LogAttrs(ctx, slog.LevelWarn, "submission rejected", slog.String("job", rj.Job), slog.Any("err", rj.Err))
	}
	for _, f := range rd.Failed {
		l.LogAttrs(ctx, slog.LevelWarn, "job failed with its node", slog.String("job", f.Job), slog.String("node", f.Node))
	}
	for _, id := range rd.Requeued {
		l.LogAttrs(ctx, slog.LevelInfo, "requeued", slog.String("job", id))
	}
	for _, err := range errs {
		l.LogAttrs(ctx, slog.LevelError, "backend may disagree with the engine", slog.Any("err", err))
	}
}
