#!/bin/sh
# run-local.sh runs the pods of indexed-job.yaml on this machine, as the
# Indexed Job would run them (no kubelet needed): the container's own
# command, read from the YAML, once per completion index with
# JOB_COMPLETION_INDEX=0..N-1, SHARDS and TRACE set as the Job sets them,
# and /results replaced by OUTDIR; then `berth merge` over the shards.
# Each pod's wall and CPU time go to OUTDIR/time-K.txt (GNU time).
#
#   examples/sweep/run-local.sh OUTDIR              # the Job as written: the whole month
#   TRACE=month:1 PARALLEL=2 examples/sweep/run-local.sh OUTDIR
#
# BERTH: the berth binary (default: built from this checkout into OUTDIR).
# TRACE: overrides the Job's TRACE. PARALLEL: pods at once (default: the
# Job's parallelism).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: run-local.sh OUTDIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
job="$here/indexed-job.yaml"

completions=$(awk '/^  completions:/ {print $2; exit}' "$job")
parallelism=$(awk '/^  parallelism:/ {print $2; exit}' "$job")
envval() { awk -v n="$1" '$0 ~ "- name: " n "$" {getline; sub(/.*value: */, ""); gsub(/"/, ""); print; exit}' "$job"; }
SHARDS=$(envval SHARDS)
TRACE=${TRACE:-$(envval TRACE)}
PARALLEL=${PARALLEL:-$parallelism}
# The container's args: the folded scalar (">-") after "args:", its lines
# joined by spaces.
cmd=$(awk '/^ *args:/ {a = 1; next} a && /- >-/ {f = 1; next} f && /^ *(resources|volumeMounts):/ {exit} f {sub(/^ +/, ""); printf "%s ", $0}' "$job")
cmd=$(printf '%s' "$cmd" | sed "s#/results/#$out/#g")

bin="$out/bin"
mkdir -p "$bin"
if [ -n "${BERTH:-}" ]; then
	ln -sf "$BERTH" "$bin/berth"
else
	(cd "$here/../.." && go build -o "$bin/berth" ./cmd/berth)
fi
export PATH="$bin:$PATH" SHARDS TRACE
echo "pods: $completions (index 0..$((completions - 1))), $PARALLEL at once, TRACE=$TRACE SHARDS=$SHARDS"
echo "command: $cmd"

start=$(date +%s.%N)
k=0
while [ "$k" -lt "$completions" ]; do
	batch=0
	while [ "$batch" -lt "$PARALLEL" ] && [ "$k" -lt "$completions" ]; do
		JOB_COMPLETION_INDEX=$k /usr/bin/time -f "pod $k: %e s wall, %U s user, %S s sys, %M KB max RSS" \
			-o "$out/time-$k.txt" sh -c "$cmd" &
		k=$((k + 1))
		batch=$((batch + 1))
	done
	wait
done
end=$(date +%s.%N)
cat "$out"/time-*.txt
echo "all pods: $(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }') s wall"
berth merge --format csv "$out"/shard-*.json > "$out/merged.csv"
cat "$out/merged.csv"
