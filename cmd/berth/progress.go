package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
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
	p := &progress{quit: make(chan struct{}), done: make(chan struct{})}
	if !on || total <= 0 {
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
			drawBar(w, unit, count(), total, time.Since(start))
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
	const width = 30
	n = min(max(n, 0), total)
	fill := int(width * n / total)
	eta := "ETA ?"
	if n > 0 {
		// The rate so far, applied to what is left.
		eta = "ETA " + (time.Duration(float64(elapsed) * float64(total-n) / float64(n))).Round(time.Second).String()
	}
	fmt.Fprintf(w, "\r[%s%s] %3d%% %d/%d %s %s, %s ", strings.Repeat("=", fill), strings.Repeat(" ", width-fill),
		100*n/total, n, total, unit, elapsed.Round(time.Second), eta)
}

// stop clears the bar and waits for its goroutine.
func (p *progress) stop() {
	p.once.Do(func() { close(p.quit) })
	<-p.done
}
