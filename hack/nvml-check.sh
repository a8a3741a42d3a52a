#!/usr/bin/env bash
# Real-GPU check of berth's NVML backend: lists what backends/nvml
# discovers on this machine (GPUs, memory, PCI, NUMA, NVLink islands, MIG
# layouts, the topology it builds) and compares it with `nvidia-smi -q -x`;
# exits non-zero on a mismatch.
#
# Read only: NVML Init, device queries and Shutdown, and nvidia-smi's
# query mode. It never changes MIG mode, creates or destroys instances,
# resets a GPU or touches any other GPU setting.
#
# Exit status: 0 when the check passed, or when it was SKIPPED: without an
# NVIDIA driver (no nvidia-smi, or libnvidia-ml.so that cannot be loaded)
# there is nothing to check, so it prints one line
#   nvml-check: SKIPPED (exit 0, nothing checked): <why>; ...
# and exits 0, so that a run on a machine without GPUs (a laptop, CI
# without GPUs) does not fail. A run that must check a GPU sets
# BERTH_REQUIRE_GPU=1 (a GPU CI runner): then a skip is a failure, exit 1.
# Non-zero otherwise: 1 for a missing tool (go, gcc), the checker's status
# for a mismatch with nvidia-smi. Usage:
#   bash hack/nvml-check.sh
#   BERTH_REQUIRE_GPU=1 bash hack/nvml-check.sh   # a skip fails
set -euo pipefail
cd "$(dirname "$0")/.."

skip() {
  if [ "${BERTH_REQUIRE_GPU:-}" = 1 ]; then
    echo "nvml-check: FAIL: $1 (BERTH_REQUIRE_GPU=1)" >&2
    exit 1
  fi
  echo "nvml-check: SKIPPED (exit 0, nothing checked): $1; BERTH_REQUIRE_GPU=1 makes this a failure"
  exit 0
}

command -v go >/dev/null 2>&1 || { echo "nvml-check: go is not installed" >&2; exit 1; }
command -v nvidia-smi >/dev/null 2>&1 || skip "no nvidia-smi on this machine (no NVIDIA driver)"
command -v gcc >/dev/null 2>&1 || { echo "nvml-check: gcc is needed (go-nvml uses cgo): apt-get install -y gcc" >&2; exit 1; }

bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
timeout 300 env CGO_ENABLED=1 go build -o "$bin/nvmlcheck" ./hack/nvmlcheck
set +e
timeout 120 "$bin/nvmlcheck" -nvidia-smi "$(command -v nvidia-smi)"
rc=$?
set -e
case $rc in
  0) echo "nvml-check: OK" ;;
  3) skip "the NVIDIA driver's libnvidia-ml.so could not be loaded or initialised" ;;
  *) echo "nvml-check: FAIL (exit $rc)" >&2; exit "$rc" ;;
esac
