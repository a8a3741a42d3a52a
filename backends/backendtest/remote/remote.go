// Package remote carries a backend over a socket: Serve runs in the
// process that owns the backend (a test), Dial in a separate process that
// runs a Runner against it. The fault suite uses it to kill the Runner's
// process (SIGKILL) at random points while the backend, and its own view
// of what is bound, lives on in the parent (backendtest.RunKill).
//
// The wire is net/rpc with the JSON codec. It carries whole-GPU members
// only: MIG instances are not sent (their profile has no JSON form), so
// fractional members and ApplyMIG are refused by the client. The client's
// Clock is a virtual one: Now asks the backend, Sleep returns at once (the
// simulator's semantics).
package remote

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/rpc"
	"net/rpc/jsonrpc"
	"time"

	"github.com/berthsched/berth/backends"
	"github.com/berthsched/berth/engine"
	"github.com/berthsched/berth/queue"
	"github.com/berthsched/berth/topo"
)

// Backend is what Serve serves: a backend with its clock.
type Backend interface {
	backends.Backend
	backends.Clock
}

// Hook is called by the server around every call: before it is carried
// out (after false) and after, before the reply is sent (after true). A
// Hook that returns false before a call makes the server not carry it out
// (and answer with an error). The test uses it to kill the client at a
// chosen call.
type Hook func(method string, after bool) bool

// error kinds on the wire
const (
	errNone = iota
	errRefused
	errClosed
	errOther
)

// Reply is the error part of every reply.
type Reply struct {
	Kind int
	Msg  string
}

func (r *Reply) set(err error) {
	switch {
	case err == nil:
		r.Kind = errNone
	case errors.Is(err, backends.ErrRefused):
		r.Kind, r.Msg = errRefused, err.Error()
	case errors.Is(err, backends.ErrClosed):
		r.Kind, r.Msg = errClosed, err.Error()
	default:
		r.Kind, r.Msg = errOther, err.Error()
	}
}

func (r *Reply) err() error {
	switch r.Kind {
	case errNone:
		return nil
	case errRefused:
		return fmt.Errorf("%w: remote: %s", backends.ErrRefused, r.Msg)
	case errClosed:
		return fmt.Errorf("%w: remote: %s", backends.ErrClosed, r.Msg)
	}
	return fmt.Errorf("remote: %s", r.Msg)
}

// Empty is an empty argument.
type Empty struct{}

// MemberArgs names one member of a job.
type MemberArgs struct {
	Job    string
	Member engine.Member
}

// ClusterReply answers Cluster.
type ClusterReply struct {
	Reply
	Spec topo.Spec
}

// RunningJob is backends.RunningJob on the wire.
type RunningJob struct {
	Job     *queue.Job
	Members []engine.Member
	Start   time.Time
}

// RunningReply answers Running.
type RunningReply struct {
	Reply
	Jobs []RunningJob
}

// PendingReply answers Pending.
type PendingReply struct {
	Reply
	Jobs []*queue.Job
}

// NextReply answers Next.
type NextReply struct {
	Reply
	Events []engine.Event
}

// NowReply answers Now.
type NowReply struct {
	Now time.Time
}

// Service is the server side (exported for net/rpc; use Serve).
type Service struct {
	b    Backend
	hook Hook
}

func (s *Service) run(method string, f func() error, r *Reply) error {
	if s.hook != nil && !s.hook(method, false) {
		r.set(errors.New("remote: call dropped"))
		return nil
	}
	r.set(f())
	if s.hook != nil {
		s.hook(method, true)
	}
	return nil
}

var bg = context.Background()

// Cluster serves Inventory.Cluster.
func (s *Service) Cluster(_ Empty, out *ClusterReply) error {
	return s.run("Cluster", func() (err error) { out.Spec, err = s.b.Cluster(bg); return err }, &out.Reply)
}

// Running serves Inventory.Running.
func (s *Service) Running(_ Empty, out *RunningReply) error {
	return s.run("Running", func() error {
		rs, err := s.b.Running(bg)
		for _, r := range rs {
			out.Jobs = append(out.Jobs, RunningJob{Job: r.Job, Members: r.Members, Start: r.Start})
		}
		return err
	}, &out.Reply)
}

// Pending serves backends.PendingReporter (an error when the backend has
// none).
func (s *Service) Pending(_ Empty, out *PendingReply) error {
	return s.run("Pending", func() (err error) {
		pr, ok := s.b.(backends.PendingReporter)
		if !ok {
			return errors.New("remote: the backend reports no pending jobs")
		}
		out.Jobs, err = pr.Pending(bg)
		return err
	}, &out.Reply)
}

// BindMember serves Actuator.BindMember.
func (s *Service) BindMember(a MemberArgs, out *Reply) error {
	return s.run("BindMember", func() error { return s.b.BindMember(bg, a.Job, a.Member) }, out)
}

// UnbindMember serves Actuator.UnbindMember.
func (s *Service) UnbindMember(a MemberArgs, out *Reply) error {
	return s.run("UnbindMember", func() error { return s.b.UnbindMember(bg, a.Job, a.Member) }, out)
}

// Preempt serves Actuator.Preempt.
func (s *Service) Preempt(p engine.Preemption, out *Reply) error {
	return s.run("Preempt", func() error { return s.b.Preempt(bg, p) }, out)
}

// Next serves Events.Next.
func (s *Service) Next(wake time.Time, out *NextReply) error {
	return s.run("Next", func() (err error) { out.Events, err = s.b.Next(bg, wake); return err }, &out.Reply)
}

// Now serves Clock.Now.
func (s *Service) Now(_ Empty, out *NowReply) error {
	r := &Reply{}
	return s.run("Now", func() error { out.Now = s.b.Now(); return nil }, r)
}

// Serve serves b on l until l is closed; hook may be nil.
func Serve(l net.Listener, b Backend, hook Hook) error {
	srv := rpc.NewServer()
	if err := srv.RegisterName("B", &Service{b: b, hook: hook}); err != nil {
		return err
	}
	for {
		c, err := l.Accept()
		if err != nil {
			return err
		}
		go srv.ServeCodec(jsonrpc.NewServerCodec(c))
	}
}

// Client is a backends.Backend, backends.PendingReporter and
// backends.Clock served by Serve in another process.
type Client struct {
	c *rpc.Client
}

// Dial connects to a server on the unix socket path.
func Dial(path string) (*Client, error) {
	conn, err := net.Dial("unix", path)
	if err != nil {
		return nil, err
	}
	return &Client{c: jsonrpc.NewClient(conn)}, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.c.Close() }

func (c *Client) call(ctx context.Context, method string, args, reply any) error {
	call := c.c.Go("B."+method, args, reply, make(chan *rpc.Call, 1))
	select {
	case <-call.Done:
		return call.Error
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Cluster implements backends.Inventory.
func (c *Client) Cluster(ctx context.Context) (topo.Spec, error) {
	var out ClusterReply
	if err := c.call(ctx, "Cluster", Empty{}, &out); err != nil {
		return topo.Spec{}, err
	}
	return out.Spec, out.err()
}

// Running implements backends.Inventory.
func (c *Client) Running(ctx context.Context) ([]backends.RunningJob, error) {
	var out RunningReply
	if err := c.call(ctx, "Running", Empty{}, &out); err != nil {
		return nil, err
	}
	var rs []backends.RunningJob
	for _, r := range out.Jobs {
		rs = append(rs, backends.RunningJob{Job: r.Job, Members: r.Members, Start: r.Start})
	}
	return rs, out.err()
}

// Pending implements backends.PendingReporter.
func (c *Client) Pending(ctx context.Context) ([]*queue.Job, error) {
	var out PendingReply
	if err := c.call(ctx, "Pending", Empty{}, &out); err != nil {
		return nil, err
	}
	return out.Jobs, out.err()
}

func wholeOnly(m engine.Member) error {
	if m.Fractional {
		return fmt.Errorf("%w: remote: fractional members are not carried", backends.ErrRefused)
	}
	return nil
}

// BindMember implements backends.Actuator (whole-GPU members only).
func (c *Client) BindMember(ctx context.Context, job string, m engine.Member) error {
	if err := wholeOnly(m); err != nil {
		return err
	}
	var out Reply
	if err := c.call(ctx, "BindMember", MemberArgs{Job: job, Member: m}, &out); err != nil {
		return err
	}
	return out.err()
}

// UnbindMember implements backends.Actuator (whole-GPU members only).
func (c *Client) UnbindMember(ctx context.Context, job string, m engine.Member) error {
	if err := wholeOnly(m); err != nil {
		return err
	}
	var out Reply
	if err := c.call(ctx, "UnbindMember", MemberArgs{Job: job, Member: m}, &out); err != nil {
		return err
	}
	return out.err()
}

// Preempt implements backends.Actuator.
func (c *Client) Preempt(ctx context.Context, p engine.Preemption) error {
	var out Reply
	if err := c.call(ctx, "Preempt", p, &out); err != nil {
		return err
	}
	return out.err()
}

// ApplyMIG is refused: MIG layouts are not carried.
func (c *Client) ApplyMIG(context.Context, engine.MIGReconfiguration) error {
	return fmt.Errorf("%w: remote: MIG changes are not carried", backends.ErrRefused)
}

// Next implements backends.Events.
func (c *Client) Next(ctx context.Context, wake time.Time) ([]engine.Event, error) {
	var out NextReply
	if err := c.call(ctx, "Next", wake, &out); err != nil {
		return nil, err
	}
	return out.Events, out.err()
}

// Now implements backends.Clock: the backend's clock. If the server cannot
// be reached it returns the zero time (the Runner's next call fails).
func (c *Client) Now() time.Time {
	var out NowReply
	if err := c.call(bg, "Now", Empty{}, &out); err != nil {
		return time.Time{}
	}
	return out.Now
}

// Sleep implements backends.Clock for a virtual clock: it returns at once.
func (c *Client) Sleep(ctx context.Context, _ time.Duration) error { return ctx.Err() }
