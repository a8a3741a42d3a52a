package slurm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// ErrMissingCommand: a SLURM command the backend needs is not installed
// (or not in Config.Bin / PATH).
var ErrMissingCommand = errors.New("slurm: command not found")

// ErrCommand: a SLURM command failed; the error carries its output.
var ErrCommand = errors.New("slurm: command failed")

// commands the backend runs; sbatch is checked too, because a cluster
// without it has no users who submit.
var commands = []string{"scontrol", "squeue", "sinfo", "scancel", "sbatch"}

// cli runs SLURM's commands without a shell, each with a timeout.
type cli struct {
	paths   map[string]string
	env     []string
	timeout time.Duration
}

func newCLI(bin string, env []string, timeout time.Duration) (*cli, error) {
	c := &cli{paths: map[string]string{}, env: append(os.Environ(), env...), timeout: timeout}
	for _, name := range commands {
		var p string
		var err error
		if bin != "" {
			p = filepath.Join(bin, name)
			_, err = os.Stat(p)
		} else {
			p, err = exec.LookPath(name)
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %s (install slurm-client, or set Config.Bin): %w", ErrMissingCommand, name, err)
		}
		c.paths[name] = p
	}
	return c, nil
}

// run runs name with args and returns its standard output. A non-zero
// exit is ErrCommand with the command's standard error; a timeout is
// context.DeadlineExceeded.
func (c *cli) run(ctx context.Context, name string, args ...string) ([]byte, error) {
	return c.runInput(ctx, "", name, args...)
}

// runInput is run with input on the command's standard input (scontrol
// reads one command a line from it: several updates in one process).
func (c *cli) runInput(ctx context.Context, input, name string, args ...string) ([]byte, error) {
	return c.runEnv(ctx, nil, input, name, args...)
}

// runEnv is runInput with env added to the command's environment.
func (c *cli) runEnv(ctx context.Context, env []string, input, name string, args ...string) ([]byte, error) {
	p, ok := c.paths[name]
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrMissingCommand, name)
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, p, args...)
	cmd.Env = append(c.env[:len(c.env):len(c.env)], env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if input != "" {
		cmd.Stdin = strings.NewReader(input)
	}
	err := cmd.Run()
	if ctx.Err() != nil {
		return nil, fmt.Errorf("slurm: %s %s: %w", name, strings.Join(args, " "), ctx.Err())
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s %s: %v: %s", ErrCommand, name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
}

var (
	jobIDRE    = regexp.MustCompile(`^[0-9]{1,12}(_[0-9]{1,9})?$`)
	nodeNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)
	partRE     = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)
)

func checkJobID(id string) error {
	if !jobIDRE.MatchString(id) {
		return fmt.Errorf("%w: job ID %q (want 123 or 123_4)", ErrBadArgument, id)
	}
	return nil
}

func checkNode(n string) error {
	if !nodeNameRE.MatchString(n) {
		return fmt.Errorf("%w: node name %q", ErrBadArgument, n)
	}
	return nil
}
