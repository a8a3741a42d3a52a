// Package cputime reads the process's CPU time, for the benchmarks that
// report it beside wall time (on a shared machine the wall time counts
// the waits for a core too).
package cputime
