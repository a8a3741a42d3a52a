package kube

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"k8s.io/apimachinery/pkg/util/validation"
)

func TestPodName(t *testing.T) {
	assert.Equal(t, "berth-infer-1-0", podName("infer-1", 0))
	// Not a DNS label as is: made one, with a hash so IDs stay apart.
	a, b := podName("Infer_1", 2), podName("infer.1", 2)
	assert.NotEqual(t, a, b)
	long := podName("a-very-long-job-identifier-that-goes-on-and-on-and-on", 11)
	for _, n := range []string{a, b, long} {
		assert.Empty(t, validation.IsDNS1123Label(n), n)
	}
}
