package slurm

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// showProc is one long-lived `scontrol --local -o` that reads commands on
// its standard input: confirmEnds' job reads (endlog.go) go to it, so a
// confirmation costs its RPCs, not a process start (on the loaded test
// cluster, starting scontrol took most of a confirmation's 0.6-0.9 s).
//
// scontrol answers a command at a time and flushes: it echoes each line
// it reads ("scontrol: show job 7"), then writes the command's output. A
// request is its commands followed by a line of a fresh random token,
// which scontrol echoes after the last output ("invalid keyword" goes to
// its standard error): the echo ends the answer. No job's text can hold
// the token, which did not exist when the job was submitted.
//
// A request that fails or outlasts CommandTimeout kills the process (the
// next request starts another), and the process is replaced every
// showProcLife (a reconfigured controller).
type showProc struct {
	mu      sync.Mutex
	cmd     *exec.Cmd
	in      io.WriteCloser
	out     *bufio.Reader
	started time.Time
}

// showProcLife is how long one scontrol process serves requests.
const showProcLife = 5 * time.Minute

// maxShowOut bounds one answer.
const maxShowOut = 16 << 20

// errShowProc: the long-lived scontrol failed (it is restarted).
var errShowProc = errors.New("slurm: scontrol (long-lived) failed")

// showJobs runs `show job <id>` for each of sids on the long-lived
// scontrol and returns its standard output (the echoed commands
// included), for parseShowJobs.
func (b *Backend) showJobs(ctx context.Context, sids []string) ([]byte, error) {
	p := &b.show
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && time.Since(p.started) > showProcLife {
		p.stopLocked()
	}
	if p.cmd == nil {
		if err := p.startLocked(b.cli); err != nil {
			return nil, err
		}
	}
	var tok [16]byte
	if _, err := rand.Read(tok[:]); err != nil {
		return nil, err
	}
	end := "berth-end-" + hex.EncodeToString(tok[:])
	var req strings.Builder
	for _, sid := range sids {
		if err := checkJobID(sid); err != nil {
			return nil, err
		}
		req.WriteString("show job " + sid + "\n")
	}
	req.WriteString(end + "\n")

	ctx, cancel := context.WithTimeout(ctx, b.cli.timeout)
	defer cancel()
	done := make(chan struct{})
	defer close(done)
	cmd := p.cmd
	go func() {
		select {
		case <-done:
		case <-ctx.Done():
			_ = cmd.Process.Kill() // the read below fails
		}
	}()
	if _, err := io.WriteString(p.in, req.String()); err != nil {
		p.stopLocked()
		return nil, fmt.Errorf("%w: %w", errShowProc, err)
	}
	var out strings.Builder
	for {
		line, err := p.out.ReadString('\n')
		if err != nil {
			p.stopLocked()
			if ctx.Err() != nil {
				return nil, fmt.Errorf("%w: %w", errShowProc, ctx.Err())
			}
			return nil, fmt.Errorf("%w: %w", errShowProc, err)
		}
		if strings.TrimRight(line, "\n") == "scontrol: "+end {
			return []byte(out.String()), nil
		}
		out.WriteString(line)
		if out.Len() > maxShowOut {
			p.stopLocked()
			return nil, fmt.Errorf("%w: an answer over %d bytes", errShowProc, maxShowOut)
		}
	}
}

// startLocked starts the process. p.mu is held.
func (p *showProc) startLocked(c *cli) error {
	path, ok := c.paths["scontrol"]
	if !ok {
		return fmt.Errorf("%w: scontrol", ErrMissingCommand)
	}
	cmd := exec.Command(path, "--local", "-o")
	cmd.Env = c.env
	cmd.Stderr = io.Discard // "invalid keyword" for each end token; errors
	in, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%w: %w", errShowProc, err)
	}
	p.cmd, p.in, p.out, p.started = cmd, in, bufio.NewReaderSize(out, 64<<10), time.Now()
	return nil
}

// stopLocked ends the process (closing its input ends scontrol; a kill
// makes sure) and reaps it. p.mu is held.
func (p *showProc) stopLocked() {
	if p.cmd == nil {
		return
	}
	cmd := p.cmd
	_ = p.in.Close()
	_ = cmd.Process.Kill()
	go func() { _ = cmd.Wait() }()
	p.cmd, p.in, p.out = nil, nil, nil
}

// close ends the process (Backend.Close).
func (p *showProc) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stopLocked()
}
