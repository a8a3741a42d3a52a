// Package promcollector exposes a backends.Runner's scheduling as
// Prometheus metrics. It lives apart from the core so that neither the
// engine nor the Runner imports client_golang.
//
// Plug a Collector into the Runner's Observe hook and register it:
//
//	c := promcollector.New(promcollector.Options{})
//	reg := prometheus.NewRegistry()
//	reg.MustRegister(c)
//	r, _ := backends.NewRunner(backends.RunnerConfig{..., Observe: c.Observe})
//	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
//
// Metrics (names follow Prometheus' conventions: base units, _total for
// counters, _seconds for durations):
//
//	berth_queue_pending_jobs{queue}           gauge   jobs waiting in the queue
//	berth_queue_running_jobs{queue}           gauge   jobs running or stopping
//	berth_queue_gpus_in_use{queue}            gauge   whole GPUs held by the queue's jobs
//	berth_queue_gpus_borrowed{queue}          gauge   GPUs the queue uses beyond its nominal quota
//	berth_pending_jobs{estimate}              gauge   pending jobs by whether they have an estimated start
//	                                                  ("estimated") or why not (engine.NoEstimate: "quota", ...)
//	berth_jobs{state}                         gauge   every job the engine knows, in exactly one state:
//	                                                  running, binding (assumed, no answer yet),
//	                                                  binding-unknown (its bind timed out), retrying
//	                                                  (bind backoff), held (MaxBindTries failed binds),
//	                                                  pending (any other reason)
//	berth_cluster_gpus                        gauge   GPUs of the cluster
//	berth_cluster_free_gpus                   gauge   allocatable free GPUs
//	berth_cycles_total                        counter scheduling cycles applied
//	berth_cycle_duration_seconds              histogram one cycle: Ready, Actuator calls, Advance
//	berth_decisions_total{kind}               counter decisions made: bind, backfill, preemption, resize, mig
//	berth_refusals_total{kind}                counter decisions the backend refused: bind (binds that failed,
//	                                                  reported later by Cycle.Binds), preemption and resize (also
//	                                                  reported later, by Cycle.Acts), mig
//	berth_bind_outcomes_total{outcome}        counter asynchronous bind outcomes: applied, failed, unknown
//	                                                  (timed out), withdrawn (Run stopped first)
//	berth_preemptions_total{cause}            counter preemptions applied (the backend took them: Cycle.Acts),
//	                                                  by cause (priority, reclaim)
//	berth_job_wait_seconds{queue}             histogram submission to bind, for each bind applied
//	                                                  (a requeued job bound again counts again, from its submission)
//	berth_rejected_submissions_total          counter submissions the engine could not accept
//	berth_apply_errors_total                  counter failures no refusal reports (the backend may disagree)
//
// The cycle duration is measured on the Runner's Clock: under the
// simulator's virtual clock it is zero.
//
// The queue gauges are computed from the latest cycle's engine.View when
// scraped, so their cost is paid per scrape, not per cycle.
package promcollector

import (
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/engine"
)

// Options configures a Collector. The zero value is usable.
type Options struct {
	// Namespace prefixes every name. Empty: "berth".
	Namespace string
	// CycleBuckets and WaitBuckets are the histograms' upper bounds, in
	// seconds. Nil: 100 µs .. ~100 s for cycles; 1 s .. ~1 week for waits.
	CycleBuckets, WaitBuckets []float64
	// ConstLabels are added to every metric (e.g. the cluster's name).
	ConstLabels prometheus.Labels
}

// Collector is a prometheus.Collector fed by backends.Cycle values.
// Observe and Collect may run concurrently.
type Collector struct {
	mu   sync.Mutex
	view *engine.View

	cycles      prometheus.Counter
	cycleDur    prometheus.Histogram
	decisions   *prometheus.CounterVec
	refusals    *prometheus.CounterVec
	preemptions *prometheus.CounterVec
	wait        *prometheus.HistogramVec
	rejected    prometheus.Counter
	applyErrors prometheus.Counter

	pendingDesc, runningDesc, inUseDesc, borrowedDesc, gpusDesc, freeDesc *prometheus.Desc
	jobsDesc                                                              *prometheus.Desc
	bindOutcomes                                                          *prometheus.CounterVec
	estimateDesc                                                          *prometheus.Desc
}

// New returns a Collector with no observations.
func New(o Options) *Collector {
	ns := o.Namespace
	if ns == "" {
		ns = "berth"
	}
	if o.CycleBuckets == nil {
		o.CycleBuckets = prometheus.ExponentialBuckets(1e-4, 4, 10)
	}
	if o.WaitBuckets == nil {
		o.WaitBuckets = prometheus.ExponentialBuckets(1, 4, 11)
	}
	cl := o.ConstLabels
	desc := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(ns, "", name), help, labels, cl)
	}
	c := &Collector{
		cycles: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "cycles_total",
			Help: "Scheduling cycles applied.", ConstLabels: cl}),
		cycleDur: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: "cycle_duration_seconds",
			Help: "Duration of one cycle: the engine's Ready, the Actuator calls and Advance.", Buckets: o.CycleBuckets, ConstLabels: cl}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "decisions_total",
			Help: "Decisions made by the engine, by kind (bind, backfill, preemption, resize, mig).", ConstLabels: cl}, []string{"kind"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "refusals_total",
			Help: "Decisions the backend refused, by kind (bind, preemption, resize, mig).", ConstLabels: cl}, []string{"kind"}),
		preemptions: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "preemptions_total",
			Help: "Preemptions applied, by cause (priority, reclaim).", ConstLabels: cl}, []string{"cause"}),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "job_wait_seconds",
			Help: "Time from submission to bind, for each bind applied.", Buckets: o.WaitBuckets, ConstLabels: cl}, []string{"queue"}),
		rejected: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "rejected_submissions_total",
			Help: "Submissions the engine could not accept.", ConstLabels: cl}),
		applyErrors: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "apply_errors_total",
			Help: "Failures no refusal reports (a rollback or a shrink that failed): the backend may disagree with the engine.", ConstLabels: cl}),
		pendingDesc:  desc("queue_pending_jobs", "Jobs pending in the queue.", "queue"),
		runningDesc:  desc("queue_running_jobs", "Jobs of the queue running or stopping.", "queue"),
		inUseDesc:    desc("queue_gpus_in_use", "Whole GPUs held by the queue's jobs.", "queue"),
		borrowedDesc: desc("queue_gpus_borrowed", "GPUs the queue uses beyond its nominal quota (borrowed from its cohort).", "queue"),
		gpusDesc:     desc("cluster_gpus", "GPUs of the cluster."),
		freeDesc:     desc("cluster_free_gpus", "Allocatable free GPUs."),
		jobsDesc:     desc("jobs", "Jobs the engine knows, by state: running, binding, binding-unknown, retrying, held, pending.", "state"),
		bindOutcomes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "bind_outcomes_total",
			Help: "Asynchronous bind outcomes: applied, failed, unknown (timed out), withdrawn.", ConstLabels: o.ConstLabels}, []string{"outcome"}),
		estimateDesc: desc("pending_jobs", "Pending jobs by whether they have an estimated start (estimated) or why not.", "estimate"),
	}
	for _, k := range []string{"bind", "backfill", "preemption", "resize", "mig"} {
		c.decisions.WithLabelValues(k)
	}
	for _, k := range []string{"bind", "preemption", "resize", "mig"} {
		c.refusals.WithLabelValues(k)
	}
	for _, k := range []string{engine.PreemptPriority.String(), engine.PreemptReclaim.String()} {
		c.preemptions.WithLabelValues(k)
	}
	return c
}

// Observe records one cycle; give it to backends.RunnerConfig.Observe
// (call it from your own Observe to chain).
func (c *Collector) Observe(cy backends.Cycle) {
	rd, out := &cy.Ready, &cy.Outcome
	c.cycles.Inc()
	c.cycleDur.Observe(cy.Duration.Seconds())
	for _, b := range rd.Binds {
		kind := "bind"
		if b.Backfill {
			kind = "backfill"
		}
		c.decisions.WithLabelValues(kind).Inc()
		if slices.Contains(out.RefusedBinds, b.Job) {
			continue
		}
		if !b.Submit.IsZero() && !rd.At.Before(b.Submit) {
			c.wait.WithLabelValues(b.Queue).Observe(rd.At.Sub(b.Submit).Seconds())
		}
	}
	c.decisions.WithLabelValues("preemption").Add(float64(len(rd.Preemptions)))
	if !out.AssumePreemptions {
		for _, p := range rd.Preemptions {
			if !slices.Contains(out.RefusedPreemptions, p.Victim) {
				c.preemptions.WithLabelValues(p.Cause.String()).Inc()
			}
		}
	}
	// Asynchronous outcomes (Cycle.Acts): preemptions applied, and the
	// preemptions and grows the backend refused or failed.
	actRefused := map[string]int{}
	for _, a := range cy.Acts {
		switch {
		case a.Unknown:
		case a.Err != nil && a.Kind == "preempt":
			actRefused["preemption"]++
		case a.Err != nil && a.Kind == "grow":
			actRefused["resize"]++
		case a.Err == nil && a.Kind == "preempt":
			c.preemptions.WithLabelValues(a.Cause.String()).Inc()
		}
	}
	c.decisions.WithLabelValues("resize").Add(float64(len(rd.Resizes)))
	c.decisions.WithLabelValues("mig").Add(float64(len(rd.MIG)))
	failed := 0
	for _, b := range cy.Binds {
		outcome := "applied"
		switch {
		case b.Withdrawn:
			outcome = "withdrawn"
		case b.Unknown:
			outcome = "unknown"
		case b.Err != nil:
			outcome = "failed"
			failed++
		}
		c.bindOutcomes.WithLabelValues(outcome).Inc()
	}
	c.refusals.WithLabelValues("bind").Add(float64(len(out.RefusedBinds) + failed))
	c.refusals.WithLabelValues("preemption").Add(float64(len(out.RefusedPreemptions) + actRefused["preemption"]))
	c.refusals.WithLabelValues("resize").Add(float64(len(out.RefusedResizes) + actRefused["resize"]))
	migFailed := 0
	for _, m := range cy.MIG {
		if m.Err != nil && !m.Unknown {
			migFailed++
		}
	}
	c.refusals.WithLabelValues("mig").Add(float64(len(out.RefusedMIG) + migFailed))
	c.rejected.Add(float64(len(rd.Rejected)))
	c.applyErrors.Add(float64(len(cy.Errors)))
	if cy.View != nil {
		c.mu.Lock()
		c.view = cy.View
		c.mu.Unlock()
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range c.static() {
		m.Describe(ch)
	}
	for _, d := range []*prometheus.Desc{c.pendingDesc, c.runningDesc, c.inUseDesc, c.borrowedDesc, c.gpusDesc, c.freeDesc, c.estimateDesc, c.jobsDesc} {
		ch <- d
	}
}

func (c *Collector) static() []prometheus.Collector {
	return []prometheus.Collector{c.cycles, c.cycleDur, c.decisions, c.refusals, c.preemptions, c.wait, c.rejected, c.applyErrors, c.bindOutcomes}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	for _, m := range c.static() {
		m.Collect(ch)
	}
	c.mu.Lock()
	v := c.view
	c.mu.Unlock()
	if v == nil {
		return
	}
	gauge := func(d *prometheus.Desc, x float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, x, labels...)
	}
	gauge(c.gpusDesc, float64(v.TotalGPUs))
	gauge(c.freeDesc, float64(v.FreeGPUs))
	running := map[string]int{}
	inUse := map[string]int{}
	rjs := v.Running()
	for _, rj := range rjs {
		running[rj.Queue]++
		inUse[rj.Queue] += rj.GPUs
	}
	states := map[string]int{"running": len(rjs), "binding": 0, "binding-unknown": 0, "retrying": 0, "held": 0, "pending": v.Unwalked}
	for _, p := range v.Pending {
		states[jobState(p.Reason)]++
	}
	for _, st := range []string{"running", "binding", "binding-unknown", "retrying", "held", "pending"} {
		gauge(c.jobsDesc, float64(states[st]), st)
	}
	for _, q := range v.Queues() {
		var borrowed int64
		for _, u := range q.Usage {
			if u.Name.IsGPU() {
				if b := int64(u.Amount) - int64(q.Nominal.Get(u.Name)); b > 0 {
					borrowed += b
				}
			}
		}
		gauge(c.pendingDesc, float64(q.Pending), q.Name)
		gauge(c.runningDesc, float64(running[q.Name]), q.Name)
		gauge(c.inUseDesc, float64(inUse[q.Name]), q.Name)
		gauge(c.borrowedDesc, float64(borrowed)/1000, q.Name)
	}
	byWhy := map[engine.NoEstimate]int{}
	for _, x := range v.Estimates() {
		byWhy[x.Why]++
	}
	for w := engine.EstimateGiven; w <= engine.NoEstimateHeld; w++ {
		gauge(c.estimateDesc, float64(byWhy[w]), w.String())
	}
}

// jobState is the berth_jobs state of a pending job.
func jobState(r engine.ReasonCode) string {
	switch r {
	case engine.ReasonBinding:
		return "binding"
	case engine.ReasonBindingUnknown:
		return "binding-unknown"
	case engine.ReasonBindRefused:
		return "retrying"
	case engine.ReasonHeld:
		return "held"
	}
	return "pending"
}
