// Command metrics runs a small workload through a backends.Runner on the
// simulator, with a promcollector.Collector on the Runner's Observe hook
// and a slog logger, and serves the metrics on /metrics:
//
//	go run ./examples/metrics -addr 127.0.0.1:9464 &
//	curl -s 127.0.0.1:9464/metrics | grep ^berth_
//
// Two teams share a cohort of 16 GPUs (8 nominal each): team "research"
// submits three 8-GPU jobs at once and borrows team "prod"'s idle quota;
// prod's job arrives later and takes its quota back by preemption
// (reclaim). The simulator's clock is virtual, so the run takes
// milliseconds; the server keeps serving its final metrics.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/backends/promcollector"
	"github.com/berthsched/berth/backends/sim"
	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:9464", "address to serve /metrics on")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	if err := serve(ctx, *addr, log); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "metrics:", err)
		os.Exit(1)
	}
}

// serve runs the simulation, then serves /metrics until ctx is done.
func serve(ctx context.Context, addr string, log *slog.Logger) error {
	reg := prometheus.NewRegistry()
	if err := simulate(ctx, reg, log, nil); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: handler(reg), ReadHeaderTimeout: 5 * time.Second}
	log.Info("serving", "url", "http://"+ln.Addr().String()+"/metrics")
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return ctx.Err()
}

// handler serves reg on /metrics.
func handler(reg *prometheus.Registry) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return mux
}

// simulate registers a collector on reg and runs the workload. stop, if
// set, is asked after every cycle whether to end the run there (the test
// stops mid-run to see jobs running).
func simulate(ctx context.Context, reg *prometheus.Registry, log *slog.Logger, stop func(backends.Cycle) bool) error {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s, err := sim.New(sim.Config{Cluster: topo.Uniform(nil, nil, 2, 8, "H100"), Start: t0})
	if err != nil {
		return err
	}
	job := func(id, q string, at time.Time) *queue.Job {
		return &queue.Job{ID: id, Queue: q, Submit: at, Preemptible: true, RuntimeEstimate: time.Hour,
			Request: gang.Request{Groups: []gang.Group{{Members: 1, GPUsPerMember: 8}}}}
	}
	for i, j := range []*queue.Job{
		job("research-1", "research", t0), job("research-2", "research", t0), job("research-3", "research", t0),
		job("prod-1", "prod", t0.Add(10*time.Minute)),
	} {
		if err := s.Submit(j, time.Hour+time.Duration(i)*time.Minute); err != nil {
			return err
		}
	}
	eight := queue.Quota{Nominal: queue.WholeGPUs(8), BorrowingLimit: queue.NoLimit(), LendingLimit: queue.NoLimit()}
	tree := queue.TreeSpec{
		Cohorts: []queue.CohortSpec{{Name: "all"}},
		Queues: []queue.QueueSpec{
			{Name: "research", Cohort: "all", Quota: map[queue.ResourceName]queue.Quota{queue.GPUMilli: eight}},
			{Name: "prod", Cohort: "all", Quota: map[queue.ResourceName]queue.Quota{queue.GPUMilli: eight}},
		},
	}
	col := promcollector.New(promcollector.Options{})
	if err := reg.Register(col); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r, err := backends.NewRunner(backends.RunnerConfig{
		Engine: engine.Config{Queues: tree, Preemption: engine.PreemptionConfig{Reclaim: true},
			Backfill: engine.BackfillConfig{Mode: engine.BackfillEASY}},
		Backend: s, Clock: s, Logger: log,
		Observe: func(c backends.Cycle) {
			col.Observe(c)
			if stop != nil && stop(c) {
				cancel()
			}
		},
	})
	if err != nil {
		return err
	}
	if err := r.Run(ctx); err != nil && !(errors.Is(err, context.Canceled) && stop != nil) {
		return err
	}
	return nil
}
