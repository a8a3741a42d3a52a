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
	"strconv"
	"strings"
	"sync"
	"time"
)

// showProc is one long-lived `scontrol --local -o` that reads commands on
// its standard input. The backend keeps two: confirmEnds' job reads
// (endlog.go) go to one, so a confirmation costs its RPCs, not a process
// start (on the loaded test cluster, starting scontrol took most of a
// confirmation's 0.6-0.9 s), and the bind batches (bind.go) to the other
// (mergeErr), so a batch costs its updates' RPCs.
//
// scontrol answers a command at a time and flushes: it echoes each line
// it reads ("scontrol: show job 7"), then writes the command's output. A
// request is its commands followed by a line of a fresh random token,
// which scontrol echoes after the last output ("invalid keyword" goes to
// its standard error): the echo ends the answer. No job's text can hold
// the token, which did not exist when the job was submitted. With
// mergeErr, standard error goes to the same pipe: an update prints
// nothing when it succeeds and its error when it fails, between its echo
// and the next command's, so a request of updates puts a token after
// each (updates).
//
// A request that fails or outlasts CommandTimeout kills the process (the
// next request starts another), and the process is replaced every
// showProcLife (a reconfigured controller).
type showProc struct {
	mu       sync.Mutex
	mergeErr bool // standard error on the pipe of standard output
	cmd      *exec.Cmd
	in       io.WriteCloser
	out      *bufio.Reader
	started  time.Time
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
	end, err := endToken()
	if err != nil {
		return nil, err
	}
	var req strings.Builder
	for _, sid := range sids {
		if err := checkJobID(sid); err != nil {
			return nil, err
		}
		req.WriteString("show job " + sid + "\n")
	}
	req.WriteString(end + "\n")
	out, err := b.show.exchange(ctx, b.cli, req.String(), end)
	return []byte(out), err
}

// updates runs each of cmds (scontrol commands of one line each, checked
// by the caller) on the long-lived update process and returns, for each,
// what scontrol wrote about it: "" when it succeeded. An error says the
// process failed (killed at the timeout, or died): any of cmds may have
// been applied.
func (b *Backend) updates(ctx context.Context, cmds []string) ([]string, error) {
	base, err := endToken()
	if err != nil {
		return nil, err
	}
	tok := func(i int) string { return base + "-" + strconv.Itoa(i) }
	var req strings.Builder
	for i, c := range cmds {
		if strings.ContainsAny(c, "\r\n") {
			return nil, fmt.Errorf("%w: a command of more than one line", ErrBadArgument)
		}
		req.WriteString(c + "\n" + tok(i) + "\n")
	}
	out, err := b.upd.exchange(ctx, b.cli, req.String(), tok(len(cmds)-1))
	if err != nil {
		return nil, err
	}
	texts := make([]string, len(cmds))
	i := 0
	for _, line := range strings.Split(out, "\n") {
		switch {
		case line == "" || line == "scontrol: "+cmds[i] || isTokenComplaint(line):
		case line == "scontrol: "+tok(i):
			i++
		default:
			if texts[i] != "" {
				texts[i] += "; "
			}
			texts[i] += line
		}
		if i == len(cmds) {
			break // (the last token's echo ends out)
		}
	}
	return texts, nil
}

// isTokenComplaint: scontrol's "invalid keyword" for an end token (of
// this request, or the last one's, which comes after the echo that ended
// it).
func isTokenComplaint(line string) bool {
	rest, ok := strings.CutPrefix(line, "invalid keyword: berth-end-")
	return ok && strings.Trim(rest, "0123456789abcdef-") == ""
}

// endToken is a fresh token that ends a request.
func endToken() (string, error) {
	var tok [16]byte
	if _, err := rand.Read(tok[:]); err != nil {
		return "", err
	}
	return "berth-end-" + hex.EncodeToString(tok[:]), nil
}

// exchange writes req to the process (started if needed) and returns what
// it wrote before its echo of the token end, the last line of req.
func (p *showProc) exchange(ctx context.Context, c *cli, req, end string) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && time.Since(p.started) > showProcLife {
		p.stopLocked()
	}
	if p.cmd == nil {
		if err := p.startLocked(c); err != nil {
			return "", err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
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
	if _, err := io.WriteString(p.in, req); err != nil {
		p.stopLocked()
		return "", fmt.Errorf("%w: %w", errShowProc, err)
	}
	var out strings.Builder
	for {
		line, err := p.out.ReadString('\n')
		if err != nil {
			p.stopLocked()
			if ctx.Err() != nil {
				return "", fmt.Errorf("%w: %w", errShowProc, ctx.Err())
			}
			return "", fmt.Errorf("%w: %w", errShowProc, err)
		}
		if strings.TrimRight(line, "\n") == "scontrol: "+end {
			return out.String(), nil
		}
		out.WriteString(line)
		if out.Len() > maxShowOut {
			p.stopLocked()
			return "", fmt.Errorf("%w: an answer over %d bytes", errShowProc, maxShowOut)
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
	in, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if p.mergeErr {
		cmd.Stderr = cmd.Stdout // (the pipe's *os.File: one descriptor for both)
	} else {
		cmd.Stderr = io.Discard // "invalid keyword" for each end token; errors
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
