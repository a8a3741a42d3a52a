package queue

import (
	"fmt"
	"strconv"
	"strings"
)

// MarshalJSON writes the limit as its amount, or "unlimited" for NoLimit,
// so that a limit survives a JSON round trip (a Limit has no exported
// fields: without this it would be written {} and read back as no limit).
func (l Limit) MarshalJSON() ([]byte, error) {
	if !l.set {
		return []byte(`"unlimited"`), nil
	}
	return strconv.AppendInt(nil, int64(l.amount), 10), nil
}

// UnmarshalJSON reads what MarshalJSON writes. Anything else, {} included,
// is an error rather than a silent "unlimited".
func (l *Limit) UnmarshalJSON(b []byte) error {
	s := strings.TrimSpace(string(b))
	if s == `"unlimited"` {
		*l = NoLimit()
		return nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return fmt.Errorf("queue: limit: want an integer amount or \"unlimited\", got %s", s)
	}
	*l = Cap(Amount(v))
	return nil
}
