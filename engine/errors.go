package engine

import "errors"

// Errors of Step, Advance and New. They come wrapped with details; match
// them with errors.Is.
var (
	// ErrInvalidConfig: Config.Validate found a bad field.
	ErrInvalidConfig = errors.New("engine: invalid config")
	// ErrTimeBackwards: an event carries a time before the engine's clock.
	ErrTimeBackwards = errors.New("engine: time went backwards")
	// ErrInvalidEvent: an event lacks a field its kind needs, or has an
	// unknown kind.
	ErrInvalidEvent = errors.New("engine: invalid event")
	// ErrUnknownJob: an event names a job the engine does not know.
	ErrUnknownJob = errors.New("engine: unknown job")
	// ErrDuplicateJob: a submitted or adopted job has the ID of a job the
	// engine already tracks.
	ErrDuplicateJob = errors.New("engine: duplicate job ID")
	// ErrUnknownNode: an event names a node the cluster does not have.
	ErrUnknownNode = errors.New("engine: unknown node")
	// ErrInvalidRequest: a submitted or adopted job's request can never be
	// placed on this engine's cluster (a Required or Preferred level the
	// cluster does not have). It wraps the gang or topo error.
	ErrInvalidRequest = errors.New("engine: invalid request")
	// ErrStaleReady: Advance was given a Ready other than the latest one.
	ErrStaleReady = errors.New("engine: stale Ready")
)
