#!/usr/bin/env bash
# Stop the cluster hack/slurm-up.sh started: cancel its jobs, then stop the
# daemons recorded in its pid files. A pid is signalled only while its
# command line still names the state dir (a reused pid is never hit). Safe
# to run any number of times.
set -uo pipefail
dir="${BERTH_SLURM_DIR:-/tmp/berth-slurm}"
run="$dir/run"
say() { printf '[slurm-down] %s\n' "$*" >&2; }
[ -d "$run" ] || exit 0

ours() {
  [ -n "$1" ] && [ -r "/proc/$1/cmdline" ] || return 1
  tr '\0' ' ' < "/proc/$1/cmdline" 2>/dev/null | grep -qF -- "$dir/"
}
stop() { # pid files: TERM, wait up to 10 s, KILL
  local f p pids=() t alive
  for f in "$@"; do
    [ -f "$f" ] || continue
    p=$(tr -dc '0-9' < "$f")
    if ours "$p"; then kill -TERM "$p" 2>/dev/null; pids+=("$p"); fi
  done
  for ((t = 0; t < 50; t++)); do
    alive=0
    for p in "${pids[@]}"; do ours "$p" && alive=1; done
    [ "$alive" = 0 ] && break
    sleep 0.2
  done
  for p in "${pids[@]}"; do ours "$p" && { kill -KILL "$p" 2>/dev/null; say "killed -9 $p"; }; done
  rm -f "$@"
}

conf="$dir/etc/slurm.conf"
if [ -f "$run/slurmctld.pid" ] && ours "$(tr -dc '0-9' < "$run/slurmctld.pid")" && [ -f "$conf" ]; then
  export SLURM_CONF="$conf"
  jobs=$(squeue -h -o '%i' 2>/dev/null | tr '\n' ' ')
  if [ -n "${jobs// /}" ]; then
    # shellcheck disable=SC2086
    scancel $jobs 2>/dev/null
    for ((t = 0; t < 100; t++)); do
      [ -z "$(squeue -h -t R,CG,S,CF -o '%i' 2>/dev/null)" ] && break
      sleep 0.2
    done
  fi
fi
shopt -s nullglob
stop "$run"/slurmd-*.pid
stop "$run/slurmctld.pid"
stop "$run/munged.pid"
left=""
for p in /proc/[0-9]*; do
  p=${p#/proc/}
  [ "$p" = "$$" ] && continue
  ours "$p" && left="$left $p($(cat "/proc/$p/comm" 2>/dev/null))"
done
[ -z "$left" ] || { say "still running:$left"; exit 1; }
say "stopped"
