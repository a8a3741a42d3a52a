package kube

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/engine"
)

// Election configures leader election on a coordination.k8s.io Lease.
type Election struct {
	// Namespace and Name of the Lease. Required.
	Namespace, Name string
	// Identity of this candidate. Empty: the host name.
	Identity string
	// LeaseDuration, RenewDeadline and RetryPeriod as in client-go's
	// leaderelection. Zero: 15 s, 10 s, 2 s (kube-scheduler's).
	// A leader that stops cleanly releases the Lease and a candidate takes
	// it within RetryPeriod; one that dies (kill -9, node lost, network
	// cut) holds it until LeaseDuration has passed since its last renewal,
	// so scheduling pauses for up to LeaseDuration + RetryPeriod (16-19 s
	// seen with the defaults). Shorter values fail over faster but renew
	// more often (one Lease update per RetryPeriod) and make a leader that
	// cannot reach the API server for RenewDeadline step down, which a
	// loaded API server can cause by itself. Required: LeaseDuration >
	// RenewDeadline > RetryPeriod (times 1.2, client-go's jitter).
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// Default client-side rate limit of a scheduler's API client (Run,
// ClientConfig). client-go's own default (5 requests/s, bursts of 10)
// delays binds by seconds: a 256-pod gang is 256 Bindings. kube-scheduler
// defaults to 50/100; berth binds whole gangs at once, so it allows more.
// The API server's priority and fairness still protects it.
const (
	DefaultQPS   = 200
	DefaultBurst = 400
)

// ClientConfig returns a copy of rc with a scheduler's client-side rate
// limit: qps requests per second with bursts of burst; zero: DefaultQPS,
// DefaultBurst; a negative qps: no client-side limit. The limit is shared
// by everything the backend sends (binds, evictions, status writes,
// events). Run applies it; build the clientset given to New from it.
func ClientConfig(rc *rest.Config, qps float32, burst int) *rest.Config {
	out := rest.CopyConfig(rc)
	if qps == 0 {
		qps = DefaultQPS
	}
	if burst <= 0 {
		burst = DefaultBurst
	}
	out.QPS, out.Burst, out.RateLimiter = qps, burst, nil
	return out
}

// RunConfig configures Run.
type RunConfig struct {
	Backend  Config
	Engine   engine.Config
	Election Election
	// QPS and Burst are the API client's rate limit (see ClientConfig).
	// Zero: DefaultQPS and DefaultBurst; a negative QPS: no client-side
	// limit.
	QPS   float32
	Burst int
	// Started, if set, is called with the backend and runner once this
	// candidate leads and the backend has started.
	Started func(*Backend, *backends.Runner)
}

// Run is a whole scheduler: it campaigns for the Lease and, while it
// leads, builds a Backend from the API server's state (nothing is carried
// over from an earlier leader or run), and runs an engine on it. It
// returns ctx.Err() when ctx is done, ErrLostLeadership when the Lease was
// lost (exit, and start again as a candidate), or the error that stopped
// the backend or the Runner.
func Run(ctx context.Context, rc *rest.Config, cfg RunConfig) error {
	if rc == nil {
		return fmt.Errorf("%w: nil rest config", ErrInvalidConfig)
	}
	el := cfg.Election
	if el.Namespace == "" || el.Name == "" {
		return fmt.Errorf("%w: Election needs a Lease namespace and name", ErrInvalidConfig)
	}
	if el.Identity == "" {
		h, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("%w: no Identity and no host name: %w", ErrInvalidConfig, err)
		}
		el.Identity = h
	}
	if el.LeaseDuration == 0 {
		el.LeaseDuration = 15 * time.Second
	}
	if el.RenewDeadline == 0 {
		el.RenewDeadline = 10 * time.Second
	}
	if el.RetryPeriod == 0 {
		el.RetryPeriod = 2 * time.Second
	}
	if err := cfg.Backend.Validate(); err != nil {
		return err
	}
	rc = ClientConfig(rc, cfg.QPS, cfg.Burst)
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: el.Namespace, Name: el.Name},
		Client:     cs.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: el.Identity},
	}
	// client-go runs OnStartedLeading on its own goroutine and does not
	// wait for it: track it so that Run returns only once it has ended.
	var (
		mu      sync.Mutex
		led     bool
		stopped bool
		runErr  error
		ended   = make(chan struct{})
	)
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: lock, LeaseDuration: el.LeaseDuration, RenewDeadline: el.RenewDeadline, RetryPeriod: el.RetryPeriod,
		ReleaseOnCancel: true, Name: el.Name,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				mu.Lock()
				if stopped {
					mu.Unlock()
					return
				}
				led = true
				mu.Unlock()
				err := lead(ctx, cs, dyn, cfg)
				mu.Lock()
				runErr = err
				mu.Unlock()
				close(ended)
				cancel() // done leading: step down (releases the Lease)
			},
			OnStoppedLeading: func() {},
		},
	})
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	le.Run(lctx)
	cancel()
	mu.Lock()
	stopped = true
	wasLed := led
	mu.Unlock()
	if wasLed {
		<-ended
	}
	mu.Lock()
	defer mu.Unlock()
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case runErr != nil && !errors.Is(runErr, context.Canceled):
		return runErr
	case wasLed:
		return ErrLostLeadership
	}
	return ctx.Err()
}

func lead(ctx context.Context, cs kubernetes.Interface, dyn dynamic.Interface, cfg RunConfig) error {
	b, err := New(cs, dyn, cfg.Backend)
	if err != nil {
		return err
	}
	if err := b.Start(ctx); err != nil {
		return err
	}
	defer b.Close()
	r, err := backends.NewRunner(b.RunnerConfig(cfg.Engine))
	if err != nil {
		return err
	}
	if cfg.Started != nil {
		cfg.Started(b, r)
	}
	return r.Run(ctx)
}
