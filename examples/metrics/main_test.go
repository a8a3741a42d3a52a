package main

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/berthsched/berth/backends"
)

// scrape GETs /metrics with an HTTP client and returns each sample line's
// value by its name and labels.
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("bad sample %q", line)
		}
		out[line[:i]] = v
	}
	return out
}

func want(t *testing.T, m map[string]float64, sample string, v float64) {
	t.Helper()
	got, ok := m[sample]
	if !ok {
		t.Errorf("no sample %s", sample)
		return
	}
	if got != v {
		t.Errorf("%s = %v, want %v", sample, got, v)
	}
}

// Mid-run: research borrows prod's idle quota; at 10m prod's job arrives
// and reclaims it by preemption. The test stops the run right after the
// cycle of that preemption and reads /metrics over HTTP.
func TestMetricsMidRun(t *testing.T) {
	reg := prometheus.NewRegistry()
	preempted := false
	stop := func(c backends.Cycle) bool {
		preempted = preempted || len(c.Ready.Preemptions) > 0
		return preempted
	}
	if err := simulate(context.Background(), reg, slog.New(slog.DiscardHandler), stop); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(handler(reg))
	defer srv.Close()
	m := scrape(t, srv.URL)
	if !preempted {
		t.Fatal("the run never preempted: the scenario tests nothing")
	}
	want(t, m, `berth_cluster_gpus`, 16)
	want(t, m, `berth_preemptions_total{cause="reclaim"}`, 1)
	want(t, m, `berth_decisions_total{kind="preemption"}`, 1)
	want(t, m, `berth_refusals_total{kind="bind"}`, 0)
	if m[`berth_decisions_total{kind="bind"}`]+m[`berth_decisions_total{kind="backfill"}`] < 2 {
		t.Errorf("binds: %v", m)
	}
	want(t, m, `berth_job_wait_seconds_count{queue="research"}`, 2)
	want(t, m, `berth_job_wait_seconds_sum{queue="research"}`, 0)
	want(t, m, `berth_queue_pending_jobs{queue="research"}`, 1)
	want(t, m, `berth_queue_pending_jobs{queue="prod"}`, 1)
	// prod's job waits for its victim's grace period: its start is known.
	want(t, m, `berth_pending_jobs{estimate="estimated"}`, 1)
	if n := m[`berth_pending_jobs{estimate="estimated"}`] + m[`berth_pending_jobs{estimate="quota"}`] +
		m[`berth_pending_jobs{estimate="not-planned"}`] + m[`berth_pending_jobs{estimate="no-limits-known"}`]; n != 2 {
		t.Errorf("pending jobs by estimate: %v, want 2 in all", n)
	}
	// The victim is stopping (still running, its GPUs still held, research
	// still borrowing) until its grace period ends.
	want(t, m, `berth_queue_running_jobs{queue="research"}`, 2)
	want(t, m, `berth_queue_gpus_in_use{queue="research"}`, 16)
	want(t, m, `berth_queue_gpus_borrowed{queue="research"}`, 8)
	want(t, m, `berth_queue_gpus_borrowed{queue="prod"}`, 0)
	for _, name := range []string{`berth_cycles_total`, `berth_cycle_duration_seconds_count`, `berth_rejected_submissions_total`,
		`berth_apply_errors_total`, `berth_cluster_free_gpus`, `berth_queue_pending_jobs{queue="prod"}`} {
		if _, ok := m[name]; !ok {
			t.Errorf("no sample %s", name)
		}
	}
}

// The whole run: every job ends; all four waited and were bound.
func TestMetricsWholeRun(t *testing.T) {
	reg := prometheus.NewRegistry()
	if err := simulate(context.Background(), reg, slog.New(slog.DiscardHandler), nil); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(handler(reg))
	defer srv.Close()
	m := scrape(t, srv.URL)
	want(t, m, `berth_queue_running_jobs{queue="research"}`, 0)
	want(t, m, `berth_queue_pending_jobs{queue="research"}`, 0)
	want(t, m, `berth_cluster_free_gpus`, 16)
	want(t, m, `berth_job_wait_seconds_count{queue="prod"}`, 1)
	if m[`berth_job_wait_seconds_count{queue="research"}`] < 3 {
		t.Errorf("research binds observed: %v", m[`berth_job_wait_seconds_count{queue="research"}`])
	}
}
