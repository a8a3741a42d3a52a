#!/usr/bin/env bash
# Fetches the public traces that berth's replay tests and experiments read,
# each from its public source repository at a pinned commit, and checks every
# file against its sha256. docs/traces.md says what each trace is, where it
# comes from and under which licence.
#
#   bash hack/get-traces.sh [--verify] [DIR]
#
# DIR defaults to $BERTH_TRACES, else ../shared/traces beside the repository
# (where the tests look first). Files already present with the right sha256
# are left alone, so the script can be re-run at will; a file with another
# checksum is fetched again. With --verify nothing is fetched: the files in
# DIR are only checked (no network needed).
#
# Fetching needs internet access (raw.githubusercontent.com and, for files
# kept in Git LFS, media.githubusercontent.com); curl honours https_proxy.
# On a machine without it, copy DIR from a machine that has it and point
# $BERTH_TRACES at the copy.
set -euo pipefail

usage() {
	echo "usage: $0 [--verify] [DIR]" >&2
	exit 2
}

verify_only=0
dir=""
for arg in "$@"; do
	case "$arg" in
	--verify) verify_only=1 ;;
	-h | --help) usage ;;
	-*) echo "get-traces: unknown option $arg" >&2; usage ;;
	*)
		[ -z "$dir" ] || usage
		dir=$arg
		;;
	esac
done
repo_root=$(cd "$(dirname "$0")/.." && pwd)
if [ -z "$dir" ]; then
	dir=${BERTH_TRACES:-$repo_root/../shared/traces}
fi

# The list: path under DIR, sha256, how to get it. Keep it in step with the
# table in docs/traces.md.
#   raw  OWNER/REPO COMMIT PATH         the file as committed
#   tar  OWNER/REPO COMMIT PATH MEMBER  one member of a committed .tar.gz
#   cut  OWNER/REPO COMMIT PATH WORKLOAD  header + rows whose first column
#        is WORKLOAD, written with CRLF line ends (as Python's csv writer
#        does, which made the published cut)
traces() {
	cat <<'EOF'
hpc/NASA-iPSC-1993-3.1-cln.swf.gz 5589ae9b2fb78e3bf92de097497cf33a91607de1ad54563e43533f7827597f29 raw cloudsimplus/cloudsimplus-examples 4394086de1dee68fd5d96cf818f92410bb660dfd src/main/resources/workload/swf/NASA-iPSC-1993-3.1-cln.swf.gz
gpu-jobs/elasticflow-itp-cluster04.csv 247850e4265f35749e98d15e82a67765301e81272334265f1fe60d65787892a9 tar microsoft/elasticflow-traces 277ed24d0e908c31a1c98145819e2e3853d8ac00 data/raw-traces.tar.gz cluster04.csv
gpu-jobs/elasticflow-traces-LICENSE.txt c2cfccb812fe482101a8f04597dfc5a9991a6b2748266c47ac91b6a5aae15383 raw microsoft/elasticflow-traces 277ed24d0e908c31a1c98145819e2e3853d8ac00 LICENSE
k8s-gpu-pods/openb_node_list_gpu_node.csv 2beca64b4d3dfa342036a34b56a495c6cef9225db836c81f541282cb1df320b5 raw alibaba/clusterdata 7a6c496e4f4b6ce6150be8f881cb051bf2abff42 cluster-trace-gpu-v2023/csv/openb_node_list_gpu_node.csv
k8s-gpu-pods/openb_pod_list_default.csv 1ee7ed79c27a3b0861cda8ddba86a004c6aba904caafa329a76ae93ca63834a8 raw alibaba/clusterdata 7a6c496e4f4b6ce6150be8f881cb051bf2abff42 cluster-trace-gpu-v2023/csv/openb_pod_list_default.csv
published/fgd_expected_alloc_ratio_openb_default.csv 8913f30636b3f6e36e424356f0c00c87629124e5e28fa2ed7d6b6bd846e359bc cut hkust-adsl/kubernetes-scheduler-simulator 8f3d6417353c5083c6d56617f255fadd8dc306bc experiments/analysis/expected_results/analysis_allo_discrete.csv openb_pod_list_default
published/fgd_expected_frag_ratio_openb_default.csv 8ef41276a9f0e2433c027ce22489586072b3e5af94ba5743f3664b562d565efa cut hkust-adsl/kubernetes-scheduler-simulator 8f3d6417353c5083c6d56617f255fadd8dc306bc experiments/analysis/expected_results/analysis_frag_ratio_discrete.csv openb_pod_list_default
EOF
}

sha256() {
	if command -v sha256sum >/dev/null 2>&1; then
		sha256sum "$1" | cut -d' ' -f1
	else
		shasum -a 256 "$1" | cut -d' ' -f1
	fi
}

# fetch URL OUT: download with bounded time; fails on HTTP errors.
fetch() {
	curl --fail --silent --show-error --location --retry 2 \
		--connect-timeout 20 --max-time 600 --output "$2" "$1"
}

# fetch_committed OWNER/REPO COMMIT PATH OUT: the file as committed, following
# a Git LFS pointer to its content.
fetch_committed() {
	local repo=$1 commit=$2 path=$3 out=$4
	if ! fetch "https://raw.githubusercontent.com/$repo/$commit/$path" "$out"; then
		echo "get-traces: cannot download $path from github.com/$repo at $commit." >&2
		echo "get-traces: this script needs internet access; on a machine without it, copy the traces" >&2
		echo "get-traces: from one that has it and set BERTH_TRACES (docs/traces.md)." >&2
		return 1
	fi
	if head -c 200 "$out" | grep -q '^version https://git-lfs'; then
		if ! fetch "https://media.githubusercontent.com/media/$repo/$commit/$path" "$out"; then
			echo "get-traces: $path is in Git LFS and media.githubusercontent.com did not serve it" >&2
			return 1
		fi
	fi
}

# cut_rows WORKLOAD < in > out: the header and the rows of one workload,
# CRLF line ends.
cut_rows() {
	awk -F, -v w="$1" 'BEGIN { ORS = "\r\n" } { sub(/\r$/, "") } NR == 1 || $1 == w { print }'
}

if [ "$verify_only" = 1 ] && [ ! -d "$dir" ]; then
	echo "get-traces: $dir is not a directory" >&2
	exit 1
fi
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/berth-traces.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

bad=0
fetched=0
while read -r rel want kind repo commit path extra; do
	dest="$dir/$rel"
	if [ -f "$dest" ] && [ "$(sha256 "$dest")" = "$want" ]; then
		echo "ok       $rel"
		continue
	fi
	if [ "$verify_only" = 1 ]; then
		if [ -f "$dest" ]; then
			echo "MISMATCH $rel (sha256 $(sha256 "$dest"), want $want)"
		else
			echo "MISSING  $rel"
		fi
		bad=$((bad + 1))
		continue
	fi
	echo "fetching $rel from github.com/$repo@${commit:0:12} $path"
	out="$tmp/$(basename "$rel")"
	case "$kind" in
	raw)
		fetch_committed "$repo" "$commit" "$path" "$out"
		;;
	tar)
		fetch_committed "$repo" "$commit" "$path" "$tmp/archive.tar.gz"
		member=$(tar -tzf "$tmp/archive.tar.gz" | awk -v m="$extra" '$0 == m || substr($0, length($0) - length(m)) == "/" m { print; exit }')
		if [ -z "$member" ]; then
			echo "get-traces: $path has no member $extra" >&2
			exit 1
		fi
		tar -xzOf "$tmp/archive.tar.gz" "$member" >"$out"
		rm -f "$tmp/archive.tar.gz"
		;;
	cut)
		fetch_committed "$repo" "$commit" "$path" "$tmp/full.csv"
		cut_rows "$extra" <"$tmp/full.csv" >"$out"
		rm -f "$tmp/full.csv"
		;;
	*)
		echo "get-traces: unknown kind $kind for $rel" >&2
		exit 1
		;;
	esac
	got=$(sha256 "$out")
	if [ "$got" != "$want" ]; then
		echo "get-traces: $rel: sha256 $got, want $want; not installed" >&2
		bad=$((bad + 1))
		continue
	fi
	mkdir -p "$(dirname "$dest")"
	mv -f "$out" "$dest"
	fetched=$((fetched + 1))
done < <(traces)

# A short README and the checksum list beside the files, unless the
# directory already has its own.
if [ "$verify_only" = 0 ]; then
	if [ ! -e "$dir/README.md" ]; then
		cat >"$dir/README.md" <<'EOF'
# berth's public traces

Fetched by berth's hack/get-traces.sh. What each file is, its source
repository, commit, licence and sha256: docs/traces.md in the berth
repository. Check them again with `bash hack/get-traces.sh --verify DIR`.
EOF
	fi
	if [ ! -e "$dir/SHA256SUMS" ]; then
		traces | awk '{ print $2 "  " $1 }' >"$dir/SHA256SUMS"
	fi
fi

if [ "$bad" -gt 0 ]; then
	echo "get-traces: $bad file(s) missing or wrong in $dir" >&2
	exit 1
fi
echo "get-traces: all traces present and verified in $dir ($fetched fetched)"
if [ "$dir" != "$(cd "$repo_root/.." && pwd)/shared/traces" ]; then
	echo "get-traces: the tests look in ../shared/traces; set BERTH_TRACES=$dir"
fi
