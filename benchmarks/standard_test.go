package benchmarks

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestStandardFills(t *testing.T) {
	for _, tc := range []struct {
		fill       Fill
		used, jobs int
		sum        string
	}{
		{Random60, 9836, 2661, "7faf8a5b6c63b8e1"},
		{Skewed60, 9834, 2631, "087ce5aac2fce05f"},
	} {
		c, err := B2K().Build()
		require.NoError(t, err)
		s := c.NewSnapshot()
		st, err := ApplyFill(s, B2K(), tc.fill)
		require.NoError(t, err)
		assert.Equal(t, tc.used, st.Used, tc.fill)
		assert.Equal(t, tc.jobs, st.Jobs, tc.fill)
		assert.Equal(t, tc.sum, fmt.Sprintf("%016x", st.Checksum), tc.fill)
		require.NoError(t, s.Verify())
	}
}
