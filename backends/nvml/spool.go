package nvml

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/berthsched/berth/gang"
	"github.com/berthsched/berth/queue"
)

// SpoolJob is one job file of a spool directory (JSON, one job a file,
// named <anything>.json). Durations are Go durations ("90s", "2h").
type SpoolJob struct {
	ID       string `json:"id"`
	Queue    string `json:"queue"`
	Priority int32  `json:"priority,omitempty"`
	// Class is "training" (default), "inference" or "best-effort".
	Class string `json:"class,omitempty"`
	// Members (default 1) each get GPUs whole GPUs, or one MIG instance of
	// MIGProfile ("1g.10gb", "3g") on a MIG box.
	Members    int    `json:"members,omitempty"`
	GPUs       int    `json:"gpus,omitempty"`
	MIGProfile string `json:"migProfile,omitempty"`
	// Command is the program and its arguments, run without a shell.
	Command         []string `json:"command"`
	Env             []string `json:"env,omitempty"`
	Dir             string   `json:"dir,omitempty"`
	RuntimeEstimate string   `json:"runtimeEstimate,omitempty"`
	RuntimeLimit    string   `json:"runtimeLimit,omitempty"`
	Preemptible     bool     `json:"preemptible,omitempty"`
	MinRuntime      string   `json:"minRuntime,omitempty"`
	GracePeriod     string   `json:"gracePeriod,omitempty"`
}

// maxSpoolFile bounds a job file.
const maxSpoolFile = 1 << 20

// ParseSpoolJob decodes and checks one job file; submit is the job's
// submission time. Errors wrap ErrInvalid.
func ParseSpoolJob(data []byte, submit time.Time) (*queue.Job, Command, error) {
	var sj SpoolJob
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&sj); err != nil {
		return nil, Command{}, fmt.Errorf("%w: job file: %v", ErrInvalid, err)
	}
	if err := validID(sj.ID); err != nil {
		return nil, Command{}, err
	}
	bad := func(f string, args ...any) error {
		return fmt.Errorf("%w: job %q: "+f, append([]any{ErrInvalid, sj.ID}, args...)...)
	}
	if len(sj.Command) == 0 || sj.Command[0] == "" {
		return nil, Command{}, bad("no command")
	}
	if sj.Members == 0 {
		sj.Members = 1
	}
	switch {
	case sj.Members < 0 || sj.Members > 64:
		return nil, Command{}, bad("members %d not in 1..64", sj.Members)
	case sj.GPUs < 0 || sj.GPUs > 64:
		return nil, Command{}, bad("gpus %d not in 0..64", sj.GPUs)
	case (sj.GPUs == 0) == (sj.MIGProfile == ""):
		return nil, Command{}, bad("give gpus or migProfile, one of them")
	}
	class := queue.ClassTraining
	switch sj.Class {
	case "", "training":
	case "inference":
		class = queue.ClassInference
	case "best-effort":
		class = queue.ClassBestEffort
	default:
		return nil, Command{}, bad("class %q", sj.Class)
	}
	var durs [4]time.Duration
	for i, s := range []string{sj.RuntimeEstimate, sj.RuntimeLimit, sj.MinRuntime, sj.GracePeriod} {
		if s == "" {
			continue
		}
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			return nil, Command{}, bad("duration %q", s)
		}
		durs[i] = d
	}
	j := &queue.Job{
		ID: sj.ID, Queue: sj.Queue, Priority: sj.Priority, Class: class,
		Request:         gang.Request{Groups: []gang.Group{{Name: "member", Members: sj.Members, GPUsPerMember: sj.GPUs, MIGProfile: sj.MIGProfile}}},
		RuntimeEstimate: durs[0], RuntimeLimit: durs[1], MinRuntime: durs[2], GracePeriod: durs[3],
		Preemptible: sj.Preemptible, Submit: submit,
	}
	if err := j.Validate(); err != nil {
		return nil, Command{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return j, Command{Args: sj.Command, Env: sj.Env, Dir: sj.Dir}, nil
}

// WatchSpool submits the job files that appear in dir until ctx is done,
// looking every interval (zero: 1s). A file taken is moved to
// dir/accepted; one that cannot be parsed or submitted to dir/rejected,
// with the reason in <name>.error next to it. It returns ctx.Err(), or an
// error when dir cannot be read or prepared.
func (b *Backend) WatchSpool(ctx context.Context, dir string, interval time.Duration) error {
	if interval <= 0 {
		interval = time.Second
	}
	for _, sub := range []string{"accepted", "rejected"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			return fmt.Errorf("%w: spool: %v", ErrInvalid, err)
		}
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if err := b.ScanSpool(ctx, dir); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// ScanSpool takes the job files in dir once, in name order (see
// WatchSpool).
func (b *Backend) ScanSpool(ctx context.Context, dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("%w: spool: %v", ErrInvalid, err)
	}
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		if e.Type().IsRegular() && strings.HasSuffix(e.Name(), ".json") {
			names = append(names, e.Name())
		}
	}
	slices.Sort(names)
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return err
		}
		path := filepath.Join(dir, name)
		err := b.spoolOne(ctx, path)
		if errors.Is(err, ErrClosed) {
			return err
		}
		sub := "accepted"
		if err != nil {
			sub = "rejected"
			_ = os.WriteFile(filepath.Join(dir, sub, name+".error"), []byte(err.Error()+"\n"), 0o644)
		}
		if rerr := os.Rename(path, filepath.Join(dir, sub, name)); rerr != nil {
			return fmt.Errorf("%w: spool: %v", ErrInvalid, rerr)
		}
	}
	return nil
}

func (b *Backend) spoolOne(ctx context.Context, path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	if st.Size() > maxSpoolFile {
		return fmt.Errorf("%w: %s is %d bytes (at most %d)", ErrInvalid, path, st.Size(), maxSpoolFile)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	j, cmd, err := ParseSpoolJob(data, time.Now())
	if err != nil {
		return err
	}
	return b.Submit(ctx, j, cmd)
}
