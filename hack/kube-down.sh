#!/usr/bin/env bash
# Stop the control plane hack/kube-up.sh started in $BERTH_KUBE_DIR
# (/tmp/berth-kube): SIGTERM to its launcher, which stops kube-apiserver
# and etcd; the pid is signalled only while its command line names the
# state dir. Safe to run any number of times.
set -uo pipefail
dir="${BERTH_KUBE_DIR:-/tmp/berth-kube}"
say() { printf '[kube-down] %s\n' "$*" >&2; }
[ -f "$dir/kubeup.pid" ] || exit 0
pid="$(tr -dc '0-9' < "$dir/kubeup.pid")"
ours() { [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' < "/proc/$pid/cmdline" | grep -qF -- "$dir"; }
if ours; then
  kill -TERM "$pid" 2>/dev/null
  for ((t = 0; t < 100; t++)); do ours || break; sleep 0.2; done
  # Not gone: kill its process group (kube-up.sh started it with setsid,
  # so the group is the launcher, kube-apiserver and etcd).
  ours && { kill -KILL -- "-$pid" 2>/dev/null; say "killed -9 process group $pid"; }
fi
rm -f "$dir/kubeup.pid" "$dir/kubeconfig"
say "stopped"
