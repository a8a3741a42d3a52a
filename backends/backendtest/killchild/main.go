// Command killchild is the berth process of the fault suite's kill -9
// scenario (backendtest.RunKill): it runs a Runner, with its state in a
// FileStore, against a backend served by the test process over a unix
// socket (package remote), until the backend's event stream ends. The
// test kills it with SIGKILL at random points and starts it again.
//
//	killchild -socket /tmp/x/b.sock -state /tmp/x/berth.state -save 30m
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/backends/backendtest/remote"
	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/queue"
)

func main() {
	sock := flag.String("socket", "", "unix socket of the backend")
	state := flag.String("state", "", "state file (FileStore)")
	save := flag.Duration("save", 30*time.Minute, "save interval, on the backend's clock")
	flag.Parse()
	if err := run(*sock, *state, *save); err != nil {
		fmt.Fprintln(os.Stderr, "killchild:", err)
		os.Exit(1)
	}
}

func run(sock, state string, save time.Duration) error {
	c, err := remote.Dial(sock)
	if err != nil {
		return err
	}
	defer c.Close()
	r, err := backends.NewRunner(backends.RunnerConfig{
		Engine: engine.Config{
			Queues:     queue.TreeSpec{Queues: []queue.QueueSpec{{Name: "q"}}},
			Backfill:   engine.BackfillConfig{Mode: engine.BackfillEASY},
			Preemption: engine.PreemptionConfig{Priority: true},
		},
		Backend: c, Clock: c,
		Store:        backends.FileStore{Path: state},
		SaveInterval: save,
		CallTimeout:  time.Minute,
		Retry:        backends.Retry{Attempts: 2},
		Logger:       slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		return err
	}
	if err := r.Run(context.Background()); err != nil {
		return err
	}
	rec := r.Reconciled()
	fmt.Fprintf(os.Stderr, "killchild: done (restored %v, finished %d, requeued %d, adopted %d, submitted %d, dropped %d)\n",
		rec.Restored, len(rec.Finished), len(rec.Requeued), len(rec.Adopted), len(rec.Submitted), len(rec.Dropped))
	return nil
}
