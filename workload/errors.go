package workload

import (
	"errors"
	"fmt"
)

// Sentinel errors. A *ParseError wraps one of them (or the underlying I/O
// error), so callers match with errors.Is and read the position with
// errors.As.
var (
	// ErrSyntax: a value or line that does not parse (not a number, a
	// broken quote, a line too long).
	ErrSyntax = errors.New("workload: syntax error")
	// ErrRange: a number that parses but is out of the allowed range
	// (a negative count, a time beyond about 95 years).
	ErrRange = errors.New("workload: value out of range")
	// ErrFieldCount: a record with the wrong number of fields.
	ErrFieldCount = errors.New("workload: wrong number of fields")
	// ErrHeader: a CSV file without a header, or one missing a required
	// column.
	ErrHeader = errors.New("workload: bad header")
	// ErrNoTraces: TracesDir found no trace directory, or TracePath no
	// trace file there; the message says how to get them (GetTraces).
	ErrNoTraces = errors.New("workload: trace directory not found")
	// ErrKind: Open was given an unknown trace kind, or a path of the
	// wrong sort for its kind.
	ErrKind = errors.New("workload: bad trace kind")
	// ErrConfig: an invalid SyntheticConfig or InflateEstimates argument.
	ErrConfig = errors.New("workload: invalid config")
)

// ParseError reports malformed input with its position. Loaders never panic
// on bad input; they return a *ParseError instead.
type ParseError struct {
	File  string // the name given to the reader (usually the path)
	Line  int    // 1-based line number; 0 when the error is not tied to a line (e.g. a bad gzip header)
	Field string // the column or SWF field name; "" when the whole line is at fault
	Err   error  // wraps ErrSyntax, ErrRange, ErrFieldCount, ErrHeader or an I/O error
}

func (e *ParseError) Error() string {
	pos := e.File
	if e.Line > 0 {
		pos = fmt.Sprintf("%s:%d", e.File, e.Line)
	}
	if e.Field != "" {
		return fmt.Sprintf("%s: field %s: %v", pos, e.Field, e.Err)
	}
	return fmt.Sprintf("%s: %v", pos, e.Err)
}

func (e *ParseError) Unwrap() error { return e.Err }

// quoteValue renders a bad value for an error message, cut to a readable
// length so that a fuzzed megabyte line does not end up in a log.
func quoteValue(b []byte) string {
	const max = 40
	if len(b) > max {
		return fmt.Sprintf("%q...", b[:max])
	}
	return fmt.Sprintf("%q", b)
}
