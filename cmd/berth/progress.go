package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// progressOn decides whether to draw the bar: "auto" draws it only when
// stderr is a terminal (a character device).
func progressOn(mode string, stderr io.Writer) bool {
	switch mode {
	case "on":
		return true
	case "off":
		return false
	}
	f, ok := stderr.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// progress draws a bar on stderr for runs that last over a second.
type progress struct {
	once sync.Once
	quit chan struct{}
	done chan struct{}
}

// startProgress starts the bar's goroutine (when on): after a second it
// redraws every 200 ms from count() out of total.
func startProgress(w io.Writer, on bool, unit string, total int64, count func() int64) *progress {
	return startBar(w, on && total > 0, func(elapsed time.Duration) { drawBar(w, unit, count(), total, elapsed) })
}

// replayBar is the progress of replays run side by side: it counts
// replays done, and measures the share done (and so the ETA) in jobs.
type replayBar struct {
	jobs    []int64        // per replay: its job count
	done    []atomic.Int64 // per replay: jobs finished so far
	ended   []atomic.Bool  // per replay: Run returned
	replays atomic.Int64   // replays ended
}

func newReplayBar(jobs []int64) *replayBar {
	return &replayBar{jobs: jobs, done: make([]atomic.Int64, len(jobs)), ended: make([]atomic.Bool, len(jobs))}
}

// progress records replay i's finished jobs; end records that it ended.
func (b *replayBar) progress(i int, finished int) { b.done[i].Store(int64(finished)) }
func (b *replayBar) end(i int) {
	if !b.ended[i].Swap(true) {
		b.replays.Add(1)
	}
}

func (b *replayBar) draw(w io.Writer, elapsed time.Duration) {
	var n, total int64
	for i, j := range b.jobs {
		total += j
		if b.ended[i].Load() {
			n += j // jobs that never finish (dropped) count once it ends
		} else {
			n += min(b.done[i].Load(), j)
		}
	}
	drawReplayBar(w, b.replays.Load(), int64(len(b.jobs)), n, total, elapsed)
}

// startReplayBar starts the bar of b (when on).
func startReplayBar(w io.Writer, on bool, b *replayBar) *progress {
	return startBar(w, on && len(b.jobs) > 0, func(elapsed time.Duration) { b.draw(w, elapsed) })
}

// startBar starts the bar's goroutine (when on): after a second it calls
// draw every 200 ms, and clears the line when stopped.
func startBar(w io.Writer, on bool, draw func(elapsed time.Duration)) *progress {
	p := &progress{quit: make(chan struct{}), done: make(chan struct{})}
	if !on {
		close(p.done)
		return p
	}
	go func() {
		defer close(p.done)
		delay := time.NewTimer(time.Second)
		defer delay.Stop()
		select {
		case <-p.quit:
			return
		case <-delay.C:
		}
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		start := time.Now().Add(-time.Second)
		for {
			draw(time.Since(start))
			select {
			case <-p.quit:
				fmt.Fprintf(w, "\r%s\r", strings.Repeat(" ", 99))
				return
			case <-tick.C:
			}
		}
	}()
	return p
}

func drawBar(w io.Writer, unit string, n, total int64, elapsed time.Duration) {
	n = min(max(n, 0), total)
	bar, pct, eta := barParts(n, total, elapsed)
	fmt.Fprintf(w, "\r%s %3d%% %d/%d %s %s, %s ", bar, pct, n, total, unit, elapsed.Round(time.Second), eta)
}

// drawReplayBar draws the replays' bar: the share done and the ETA from
// jobs, the count in replays.
func drawReplayBar(w io.Writer, replays, of, n, total int64, elapsed time.Duration) {
	n = min(max(n, 0), total)
	bar, pct, eta := barParts(n, total, elapsed)
	fmt.Fprintf(w, "\r%s %3d%% %d/%d replays (%d/%d jobs) %s, %s ", bar, pct, replays, of, n, total, elapsed.Round(time.Second), eta)
}

// barParts returns the bar, the percentage and the ETA of n out of total.
func barParts(n, total int64, elapsed time.Duration) (bar string, pct int64, eta string) {
	const width = 30
	if total <= 0 {
		return "[" + strings.Repeat(" ", width) + "]", 0, "ETA ?"
	}
	fill := int(width * n / total)
	eta = "ETA ?"
	if n > 0 {
		// The rate so far, applied to what is left.
		eta = "ETA " + (time.Duration(float64(elapsed) * float64(total-n) / float64(n))).Round(time.Second).String()
	}
	return "[" + strings.Repeat("=", fill) + strings.Repeat(" ", width-fill) + "]", 100 * n / total, eta
}

// stop clears the bar and waits for its goroutine.
func (p *progress) stop() {
	p.once.Do(func() { close(p.quit) })
	<-p.done
}
