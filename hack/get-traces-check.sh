#!/usr/bin/env bash
# Checks hack/get-traces.sh without the network: a stand-in curl serves a
# local mirror of the source repositories, built from an existing copy of the
# traces (the upstream files the script cuts are rebuilt around the published
# rows, with other workloads' rows and LF line ends, as upstream has them).
# It checks a full fetch, the sha256 verification, idempotence, a corrupted
# file, and the message when the network is unreachable.
#
#   bash hack/get-traces-check.sh
#
# Without a traces copy ($BERTH_TRACES or ../shared/traces) it says so and
# exits 0, or 1 under BERTH_REQUIRE_TRACES=1.
set -euo pipefail
cd "$(dirname "$0")/.."
script=$PWD/hack/get-traces.sh

src=${BERTH_TRACES:-../shared/traces}
if [ ! -f "$src/hpc/NASA-iPSC-1993-3.1-cln.swf.gz" ]; then
	echo "get-traces-check: no traces copy at $src (get them with: bash hack/get-traces.sh DIR, and set BERTH_TRACES=DIR)"
	[ "${BERTH_REQUIRE_TRACES:-0}" = 1 ] && exit 1
	exit 0
fi
src=$(cd "$src" && pwd)

work=$(mktemp -d "${TMPDIR:-/tmp}/berth-get-traces-check.XXXXXX")
trap 'rm -rf "$work"' EXIT
mirror=$work/mirror
fail() {
	echo "get-traces-check: FAIL: $*" >&2
	exit 1
}
put() { # put raw|media REPO/COMMIT/PATH < content
	mkdir -p "$(dirname "$mirror/$1/$2")"
	cat >"$mirror/$1/$2"
}

put raw cloudsimplus/cloudsimplus-examples/4394086de1dee68fd5d96cf818f92410bb660dfd/src/main/resources/workload/swf/NASA-iPSC-1993-3.1-cln.swf.gz \
	<"$src/hpc/NASA-iPSC-1993-3.1-cln.swf.gz"
ef=microsoft/elasticflow-traces/277ed24d0e908c31a1c98145819e2e3853d8ac00
mkdir -p "$work/tar/raw-traces"
cp "$src/gpu-jobs/elasticflow-itp-cluster04.csv" "$work/tar/raw-traces/cluster04.csv"
echo "job_id,submission_time,duration,num_gpu" >"$work/tar/raw-traces/cluster014.csv" # a decoy name
tar -czf "$work/raw-traces.tar.gz" -C "$work/tar" raw-traces
put raw "$ef/data/raw-traces.tar.gz" <"$work/raw-traces.tar.gz"
# The licence as a Git LFS pointer on raw, its content on media.
printf 'version https://git-lfs.github.com/spec/v1\noid sha256:0\nsize 1141\n' | put raw "$ef/LICENSE"
put media "$ef/LICENSE" <"$src/gpu-jobs/elasticflow-traces-LICENSE.txt"
cd_=alibaba/clusterdata/7a6c496e4f4b6ce6150be8f881cb051bf2abff42/cluster-trace-gpu-v2023/csv
put raw "$cd_/openb_node_list_gpu_node.csv" <"$src/k8s-gpu-pods/openb_node_list_gpu_node.csv"
put raw "$cd_/openb_pod_list_default.csv" <"$src/k8s-gpu-pods/openb_pod_list_default.csv"
hk=hkust-adsl/kubernetes-scheduler-simulator/8f3d6417353c5083c6d56617f255fadd8dc306bc/experiments/analysis/expected_results
for pair in alloc_ratio:allo frag_ratio:frag_ratio; do
	cut=$src/published/fgd_expected_${pair%%:*}_openb_default.csv
	{
		head -n 1 "$cut" | tr -d '\r'
		tail -n +2 "$cut" | tr -d '\r' | sed 's/^openb_pod_list_default,/openb_pod_list_cpu050,/'
		tail -n +2 "$cut" | tr -d '\r'
		tail -n +2 "$cut" | tr -d '\r' | sed 's/^openb_pod_list_default,/openb_pod_list_default_x,/'
	} | put raw "$hk/analysis_${pair##*:}_discrete.csv"
done

# The stand-in curl: the script's flags, then one URL.
mkdir -p "$work/bin"
cat >"$work/bin/curl" <<EOF
#!/usr/bin/env bash
out= url=
while [ \$# -gt 0 ]; do
	case "\$1" in
	--output) out=\$2; shift 2 ;;
	--connect-timeout | --max-time | --retry) shift 2 ;;
	-*) shift ;;
	*) url=\$1; shift ;;
	esac
done
[ -n "\${OFFLINE:-}" ] && { echo "curl: (6) Could not resolve host" >&2; exit 6; }
case "\$url" in
https://raw.githubusercontent.com/*) p=$mirror/raw/\${url#https://raw.githubusercontent.com/} ;;
https://media.githubusercontent.com/media/*) p=$mirror/media/\${url#https://media.githubusercontent.com/media/} ;;
*) exit 6 ;;
esac
[ -f "\$p" ] || { echo "curl: (22) 404 \$url" >&2; exit 22; }
cp "\$p" "\$out"
EOF
chmod +x "$work/bin/curl"
export PATH=$work/bin:$PATH

dest=$work/traces
echo "-- full fetch"
bash "$script" "$dest" >"$work/out" 2>&1 || { cat "$work/out"; fail "fetch failed"; }
grep -q "(7 fetched)" "$work/out" || { cat "$work/out"; fail "expected 7 files fetched"; }
(cd "$dest" && sha256sum -c --quiet SHA256SUMS) || fail "SHA256SUMS does not check"
for f in hpc/NASA-iPSC-1993-3.1-cln.swf.gz gpu-jobs/elasticflow-itp-cluster04.csv k8s-gpu-pods/openb_pod_list_default.csv published/fgd_expected_alloc_ratio_openb_default.csv published/fgd_expected_frag_ratio_openb_default.csv; do
	cmp -s "$src/$f" "$dest/$f" || fail "$f differs from the copy"
done
[ -f "$dest/README.md" ] || fail "no README.md written"

echo "-- second run fetches nothing"
bash "$script" "$dest" >"$work/out" 2>&1 || fail "rerun failed"
grep -q "(0 fetched)" "$work/out" || { cat "$work/out"; fail "rerun fetched again"; }

echo "-- --verify reports a corrupted file, a fetch repairs it"
echo x >>"$dest/hpc/NASA-iPSC-1993-3.1-cln.swf.gz"
if bash "$script" --verify "$dest" >"$work/out" 2>&1; then fail "--verify passed a corrupted file"; fi
grep -q "MISMATCH hpc/NASA-iPSC-1993-3.1-cln.swf.gz" "$work/out" || fail "--verify did not name the file"
bash "$script" "$dest" >"$work/out" 2>&1 || fail "repair failed"
grep -q "(1 fetched)" "$work/out" || fail "repair fetched the wrong count"

echo "-- offline: a clear error"
rm "$dest/published/fgd_expected_frag_ratio_openb_default.csv"
if OFFLINE=1 bash "$script" "$dest" >"$work/out" 2>&1; then fail "offline fetch succeeded"; fi
grep -q "needs internet access" "$work/out" || { cat "$work/out"; fail "offline message missing"; }

echo "get-traces-check: all passed"
