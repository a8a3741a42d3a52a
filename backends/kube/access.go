package kube

import (
	"context"
	"fmt"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Access is one permission the scheduler uses.
type Access struct {
	Group, Resource, Subresource, Verb string
	// Why says what it is used for.
	Why string
}

func (a Access) String() string {
	r := a.Resource
	if a.Subresource != "" {
		r += "/" + a.Subresource
	}
	if a.Group != "" {
		r += "." + a.Group
	}
	return a.Verb + " " + r
}

// RequiredAccess lists exactly the permissions the scheduler uses (Run
// with leader election included), cluster-wide. The ClusterRole in
// examples/kube-scheduler/rbac.yaml grants these and nothing else (a test
// keeps them equal).
func RequiredAccess() []Access {
	return []Access{
		{"", "nodes", "", "get", "inventory"},
		{"", "nodes", "", "list", "inventory"},
		{"", "nodes", "", "watch", "inventory"},
		{"", "pods", "", "get", "pending work and running pods"},
		{"", "pods", "", "list", "pending work and running pods"},
		{"", "pods", "", "watch", "pending work and running pods"},
		{"", "pods", "", "create", "service replicas (engine.Service)"},
		{"", "pods", "", "delete", "rolling back a half-bound gang, stopping service replicas"},
		{"", "pods", "binding", "create", "binding"},
		{"", "pods", "eviction", "create", "preemption (honours PodDisruptionBudgets)"},
		{"", "pods", "status", "patch", "PodScheduled=False and nominatedNodeName"},
		{"", "events", "", "create", "FailedScheduling events"},
		{"", "events", "", "patch", "FailedScheduling events (repeats)"},
		{"coordination.k8s.io", "leases", "", "get", "leader election"},
		{"coordination.k8s.io", "leases", "", "create", "leader election"},
		{"coordination.k8s.io", "leases", "", "update", "leader election"},
		{"scheduling.x-k8s.io", "podgroups", "", "get", "gang size (minMember)"},
	}
}

// CheckAccess asks the API server (SelfSubjectAccessReview) whether the
// client's identity has every permission of RequiredAccess. The error
// wraps ErrForbidden and names each one missing.
func CheckAccess(ctx context.Context, cs kubernetes.Interface) error {
	return checkAccess(ctx, cs, RequiredAccess())
}

func checkAccess(ctx context.Context, cs kubernetes.Interface, list []Access) error {
	var missing []string
	for _, a := range list {
		r, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Group: a.Group, Resource: a.Resource, Subresource: a.Subresource, Verb: a.Verb,
			}},
		}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("kube: access review of %v: %w", a, err)
		}
		if !r.Status.Allowed {
			missing = append(missing, a.String())
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: %s", ErrForbidden, strings.Join(missing, ", "))
	}
	return nil
}
