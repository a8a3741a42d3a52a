// Package serving is the autoscaling policy of inference services (issue
// 14, docs/autoscaling.md): a Scaler turns signals about a service (queue
// depth, request latency, utilization, request rate), fed as events with
// their times, into a desired replica count, and an Autoscaler holds one
// Scaler per service and emits engine.ServiceScaled events when a desired
// count changes. Diurnal is a seeded day/night request-rate model.
//
// The default Scaler, HPA, is the rule of Kubernetes' Horizontal Pod
// Autoscaler (https://kubernetes.io/docs/tasks/run-application/horizontal-pod-autoscale/):
//
//	ratio   = metric / target                    (an average per replica)
//	ratio   = metric / (target x current)        (a total for the service)
//	desired = ceil(current x ratio)              unless |ratio - 1| <= tolerance
//
// then a stabilization window per direction (scale-down: the highest
// recommendation of the last 300 s by default; scale-up: the lowest of
// its window, 0 s by default), rate-limit policies per direction ("at most
// 4 pods or 100% per 15 s"), a clamp to [Min, Max], and scale to zero
// when Min is 0. See HPAConfig for every rule and its default.
//
// The package is pure, like the engine: no clock (time comes from the
// signals), no randomness but explicitly seeded streams, no goroutines, no
// I/O. A Scaler or Autoscaler is not safe for concurrent use.
package serving
