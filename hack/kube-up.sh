#!/usr/bin/env bash
# Start a local Kubernetes control plane for berth's quick start and
# examples/kube-scheduler: envtest's kube-apiserver and etcd (built from Go
# modules by hack/kube-assets.sh: ~10 minutes the first time, seconds
# after), with the coscheduling PodGroup CRD (backends/kube/testdata/crds),
# the berth-system namespace (the leader election Lease) and fake GPU
# nodes: BERTH_KUBE_RACKS racks (2) of BERTH_KUBE_NODES nodes (4) with
# BERTH_KUBE_GPUS nvidia.com/gpu (8), labelled berth.dev/rack=a, b, ...
# No kubelet runs: bound pods stay Pending with spec.nodeName set.
#
# Writes $BERTH_KUBE_DIR/kubeconfig (/tmp/berth-kube) once ready and
# prints how to run the example. Stop it with hack/kube-down.sh (same
# BERTH_KUBE_DIR). Idempotent: a running instance is stopped first.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
dir="${BERTH_KUBE_DIR:-/tmp/berth-kube}"
wait_s="${BERTH_KUBE_WAIT_S:-600}"
say() { printf '[kube-up] %s\n' "$*" >&2; }
fail() { say "ERROR: $*"; exit 1; }

command -v go >/dev/null || fail "go is not on PATH"
assets="$(bash "$here/kube-assets.sh")" || fail "hack/kube-assets.sh could not build kube-apiserver and etcd"
BERTH_KUBE_DIR="$dir" bash "$here/kube-down.sh" || true
mkdir -p "$dir"
rm -f "$dir/kubeconfig"

say "building the control plane's launcher (first time: a few minutes)"
(cd "$root/backends/kube" && go build -o "$dir/kubeup" ./internal/kubeup) || fail "go build ./internal/kubeup"
export KUBEBUILDER_ASSETS="$assets"
export KUBEBUILDER_CONTROLPLANE_START_TIMEOUT="${KUBEBUILDER_CONTROLPLANE_START_TIMEOUT:-120s}"
(cd "$root/backends/kube" && exec setsid "$dir/kubeup" -dir "$dir" -crds testdata/crds \
  -racks "${BERTH_KUBE_RACKS:-2}" -nodes "${BERTH_KUBE_NODES:-4}" -gpus "${BERTH_KUBE_GPUS:-8}" \
  >"$dir/kubeup.log" 2>&1 </dev/null) &
echo $! > "$dir/kubeup.pid"
for ((t = 0; t < wait_s * 5; t++)); do
  [ -f "$dir/kubeconfig" ] && break
  kill -0 "$(cat "$dir/kubeup.pid")" 2>/dev/null || fail "the control plane stopped: $(tail -5 "$dir/kubeup.log")"
  sleep 0.2
done
[ -f "$dir/kubeconfig" ] || fail "not ready after ${wait_s}s (log: $dir/kubeup.log)"
say "$(grep -m1 'API server at' "$dir/kubeup.log" || echo ready)"
cat >&2 <<MSG
[kube-up] ready. Run berth as the scheduler, then submit the sample gang:
  export KUBECONFIG=$dir/kubeconfig
  (cd examples/kube-scheduler && go run . -kubeconfig \$KUBECONFIG -id local)
  kubectl apply -f examples/kube-scheduler/gang.yaml
  kubectl get pods -o wide            # bound: NODE set (no kubelet: they stay Pending)
  kubectl get crds                    # podgroups.scheduling.x-k8s.io
Stop it: BERTH_KUBE_DIR=$dir bash hack/kube-down.sh
MSG
