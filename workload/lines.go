package workload

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"time"
)

// maxLineBytes bounds one input line; a longer line is a syntax error rather
// than an unbounded allocation.
const maxLineBytes = 1 << 20

// maxSeconds bounds every time value (about 95 years), so that a sum of two
// times still fits in a time.Duration.
const maxSeconds = 3_000_000_000

// maxCount bounds counts (GPUs, processors).
const maxCount = math.MaxInt32

// lineReader yields numbered lines. It strips "\r\n" and a UTF-8 byte order
// mark on the first line.
type lineReader struct {
	sc   *bufio.Scanner
	name string
	line int   // number of the line last returned
	read int64 // bytes returned so far, counting one per line end
	// unterminated: the last line had no newline (the file may have been
	// cut, e.g. "...,16" to "...,1").
	unterminated bool
}

func newLineReader(r io.Reader, name string) *lineReader {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxLineBytes)
	lr := &lineReader{sc: sc, name: name}
	sc.Split(func(data []byte, atEOF bool) (int, []byte, error) {
		adv, tok, err := bufio.ScanLines(data, atEOF)
		if atEOF && tok != nil && adv == len(data) && len(data) > 0 && data[len(data)-1] != '\n' {
			lr.unterminated = true
		}
		return adv, tok, err
	})
	return lr
}

// warnings are what a loader reports about the file as a whole.
func (lr *lineReader) warnings() []string {
	if !lr.unterminated {
		return nil
	}
	return []string{fmt.Sprintf("%s: line %d, the last, has no newline: the file may be truncated (the line is read as it is)", lr.name, lr.line)}
}

// next returns the next line; ok is false at the end of input or on error
// (see err). The slice is valid until the next call.
func (lr *lineReader) next() ([]byte, bool) {
	if !lr.sc.Scan() {
		return nil, false
	}
	lr.line++
	b := lr.sc.Bytes()
	lr.read += int64(len(b)) + 1
	if lr.line == 1 {
		b = bytes.TrimPrefix(b, []byte("\xef\xbb\xbf"))
	}
	return b, true
}

// err returns the reading error, if any, as a *ParseError.
func (lr *lineReader) err() error {
	err := lr.sc.Err()
	if err == nil {
		return nil
	}
	if errors.Is(err, bufio.ErrTooLong) {
		err = fmt.Errorf("%w: line longer than %d bytes", ErrSyntax, maxLineBytes)
	}
	return &ParseError{File: lr.name, Line: lr.line + 1, Err: err}
}

// parseInt parses an optionally signed decimal integer without allocating.
func parseInt(b []byte) (int64, bool) {
	if len(b) == 0 {
		return 0, false
	}
	neg := false
	switch b[0] {
	case '-':
		neg = true
		b = b[1:]
	case '+':
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 18 { // 18 digits cannot overflow int64
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	if neg {
		n = -n
	}
	return n, true
}

// parseNumber parses an integer (fast path) or a finite decimal float.
func parseNumber(b []byte) (float64, bool) {
	if n, ok := parseInt(b); ok {
		return float64(n), true
	}
	if len(b) == 0 || len(b) > 64 {
		return 0, false
	}
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, false
	}
	return f, true
}

// toDuration converts seconds in [0, maxSeconds] to a Duration, exactly for
// whole seconds and rounded to the nanosecond otherwise.
func toDuration(sec float64) time.Duration {
	if w := math.Trunc(sec); w == sec {
		return time.Duration(int64(w)) * time.Second
	}
	return time.Duration(math.Round(sec * 1e9))
}

// splitSpace splits a line on ASCII blanks into dst[:0].
func splitSpace(dst [][]byte, line []byte) [][]byte {
	dst = dst[:0]
	i := 0
	for i < len(line) {
		for i < len(line) && isBlank(line[i]) {
			i++
		}
		j := i
		for j < len(line) && !isBlank(line[j]) {
			j++
		}
		if j > i {
			dst = append(dst, line[i:j])
		}
		i = j
	}
	return dst
}

func trimRightBlank(b []byte) []byte {
	for len(b) > 0 && isBlank(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return b
}

func isBlank(c byte) bool { return c == ' ' || c == '\t' || c == '\v' || c == '\f' || c == '\r' }

// errBadQuote is the detail of a malformed quoted CSV field.
var errBadQuote = fmt.Errorf("%w: malformed quoted field", ErrSyntax)

// splitCSV splits one CSV line into dst[:0], trimming blanks around fields.
// A field may be quoted ("a,b", with "" for a quote); a quoted field cannot
// span lines.
func splitCSV(dst [][]byte, line []byte) ([][]byte, error) {
	dst = dst[:0]
	i := 0
	for {
		for i < len(line) && isBlank(line[i]) {
			i++
		}
		if i < len(line) && line[i] == '"' {
			var f []byte
			i++
			for {
				k := bytes.IndexByte(line[i:], '"')
				if k < 0 {
					return dst, errBadQuote
				}
				f = append(f, line[i:i+k]...)
				i += k + 1
				if i < len(line) && line[i] == '"' {
					f = append(f, '"')
					i++
					continue
				}
				break
			}
			for i < len(line) && isBlank(line[i]) {
				i++
			}
			if f == nil {
				f = []byte{}
			}
			dst = append(dst, f)
			if i == len(line) {
				return dst, nil
			}
			if line[i] != ',' {
				return dst, errBadQuote
			}
			i++
			continue
		}
		k := bytes.IndexByte(line[i:], ',')
		if k < 0 {
			f := trimRightBlank(line[i:])
			if bytes.IndexByte(f, '"') >= 0 {
				return dst, errBadQuote
			}
			dst = append(dst, f)
			return dst, nil
		}
		f := trimRightBlank(line[i : i+k])
		if bytes.IndexByte(f, '"') >= 0 {
			return dst, errBadQuote
		}
		dst = append(dst, f)
		i += k + 1
	}
}

// csvReader reads a CSV file with a header line, mapping wanted columns by
// name so that column order and extra columns do not matter.
type csvReader struct {
	lr      *lineReader
	columns []string // wanted column names
	index   []int    // field index of each wanted column; -1 when absent
	width   int      // number of header fields
	fields  [][]byte // the current record
	size    int64    // input bytes, 0 when unknown
}

// buffer returns a jobBuffer sized from the input when its size is known.
func (c *csvReader) buffer() jobBuffer {
	return jobBuffer{size: c.size, consumed: func() int64 { return c.lr.read }}
}

// newCSVReader reads the header. columns[:required] must be present;
// the rest are optional.
func newCSVReader(r io.Reader, name string, columns []string, required int) (*csvReader, error) {
	c := &csvReader{lr: newLineReader(r, name), columns: columns, index: make([]int, len(columns)), size: sizeOf(r)}
	var line []byte
	for {
		b, ok := c.lr.next()
		if !ok {
			if err := c.lr.err(); err != nil {
				return nil, err
			}
			return nil, &ParseError{File: name, Line: c.lr.line, Err: fmt.Errorf("%w: no header line", ErrHeader)}
		}
		if len(bytes.TrimSpace(b)) > 0 {
			line = b
			break
		}
	}
	hdr, err := splitCSV(nil, line)
	if err != nil {
		return nil, &ParseError{File: name, Line: c.lr.line, Err: err}
	}
	c.width = len(hdr)
	for i, col := range columns {
		c.index[i] = -1
		for k, h := range hdr {
			if string(bytes.ToLower(h)) == col {
				c.index[i] = k
				break
			}
		}
		if c.index[i] < 0 && i < required {
			return nil, &ParseError{File: name, Line: c.lr.line, Field: col, Err: fmt.Errorf("%w: missing column", ErrHeader)}
		}
	}
	return c, nil
}

// next reads the next non-blank record; it returns false at the end of input.
func (c *csvReader) next() (bool, error) {
	for {
		b, ok := c.lr.next()
		if !ok {
			return false, c.lr.err()
		}
		if len(trimRightBlank(b)) == 0 {
			continue
		}
		var err error
		c.fields, err = splitCSV(c.fields, b)
		if err != nil {
			return false, &ParseError{File: c.lr.name, Line: c.lr.line, Err: err}
		}
		if len(c.fields) != c.width {
			return false, &ParseError{File: c.lr.name, Line: c.lr.line,
				Err: fmt.Errorf("%w: %d fields, header has %d", ErrFieldCount, len(c.fields), c.width)}
		}
		return true, nil
	}
}

// line is the number of the current record's line.
func (c *csvReader) line() int { return c.lr.line }

// field returns column i of the current record; nil when the column is absent.
func (c *csvReader) field(i int) []byte {
	if c.index[i] < 0 {
		return nil
	}
	return c.fields[c.index[i]]
}

func (c *csvReader) fail(i int, err error) error {
	return &ParseError{File: c.lr.name, Line: c.lr.line, Field: c.columns[i], Err: err}
}

// int reads column i as an integer in [lo, hi]. A float with an integral
// value ("8.0") is accepted.
func (c *csvReader) int(i int, lo, hi int64) (int64, error) {
	b := c.field(i)
	n, ok := parseInt(b)
	if !ok {
		f, fok := parseNumber(b)
		if !fok || f != math.Trunc(f) || math.Abs(f) > 1e18 {
			return 0, c.fail(i, fmt.Errorf("%w: not an integer: %s", ErrSyntax, quoteValue(b)))
		}
		n = int64(f)
	}
	if n < lo || n > hi {
		return 0, c.fail(i, fmt.Errorf("%w: %d not in [%d, %d]", ErrRange, n, lo, hi))
	}
	return n, nil
}

// seconds reads column i as a time in seconds in [0, maxSeconds].
func (c *csvReader) seconds(i int) (time.Duration, error) {
	b := c.field(i)
	f, ok := parseNumber(b)
	if !ok {
		return 0, c.fail(i, fmt.Errorf("%w: not a number: %s", ErrSyntax, quoteValue(b)))
	}
	if f < 0 || f > maxSeconds {
		return 0, c.fail(i, fmt.Errorf("%w: %s s not in [0, %d]", ErrRange, quoteValue(b), maxSeconds))
	}
	return toDuration(f), nil
}
