#!/usr/bin/env bash
# kube-assets.sh - build the kube-apiserver and etcd binaries that envtest
# (sigs.k8s.io/controller-runtime/pkg/envtest) launches, from Go modules only.
#
#   export KUBEBUILDER_ASSETS="$(hack/kube-assets.sh)"
#
# stdout carries only the output folder; progress goes to stderr.
# Folder: $1, else $KUBE_ASSETS_DIR, else
#   ${XDG_CACHE_HOME:-$HOME/.cache}/kube-assets/<kube>-etcd-<etcd>.
# Re-runnable: when the folder already holds binaries of the pinned versions
# the script prints it and exits. A cold build takes ~10 minutes on 2 cores
# and ~4 GB of module + build cache.
#
# Pins (env): KUBE_VERSION (v1.37.2), ETCD_VERSION (v3.7.3).
set -euo pipefail

kube="${KUBE_VERSION:-v1.37.2}"
etcdv="${ETCD_VERSION:-v3.7.3}"
dest="${1:-${KUBE_ASSETS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kube-assets/${kube}-etcd-${etcdv}}}"

say() { printf 'kube-assets: %s\n' "$*" >&2; }

if [[ ! "$kube" =~ ^v1\.[0-9]+\.[0-9]+$ ]]; then say "KUBE_VERSION must be v1.X.Y, got '$kube'"; exit 2; fi
if [[ ! "$etcdv" =~ ^v3\.[0-9]+\.[0-9]+$ ]]; then say "ETCD_VERSION must be v3.X.Y, got '$etcdv'"; exit 2; fi
# Kubernetes v1.X.Y publishes its staging repositories as k8s.io/<name> v0.X.Y.
staging="v0.${kube#v1.}"
minor="$(cut -d. -f2 <<<"$kube")"

ready() {
  [[ -x "$dest/kube-apiserver" && -x "$dest/etcd" ]] || return 1
  timeout 20 "$dest/kube-apiserver" --version 2>/dev/null | grep -qx "Kubernetes $kube" || return 1
  timeout 20 "$dest/etcd" --version 2>/dev/null | grep -q "etcd Version: ${etcdv#v}" || return 1
}

if ready; then
  say "already built: $dest"
  printf '%s\n' "$dest"
  exit 0
fi

command -v go >/dev/null || { say "go is not on PATH"; exit 1; }
mkdir -p "$dest"
scratch="$(mktemp -d "${TMPDIR:-/tmp}/kube-assets.XXXXXX")"
trap 'rm -rf "$scratch"' EXIT
export CGO_ENABLED=0 GOFLAGS=-buildvcs=false GO111MODULE=on GOWORK=off
t0=$SECONDS

# kube-apiserver. k8s.io/kubernetes' go.mod points every staging module at
# ./staging/src/k8s.io/<name>; outside that repository those replaces do not
# apply, so a scratch module re-points each at its published v0.X.Y version.
say "fetching k8s.io/kubernetes@$kube"
gomod="$(cd "$scratch" && go mod download -json "k8s.io/kubernetes@$kube" |
         sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')"
[[ -f "$gomod" ]] || { say "no go.mod for k8s.io/kubernetes@$kube"; exit 1; }
mapfile -t mods < <(awk '
  $2 == "=>" && $3 ~ /^\.\/staging\/src\// { print $1 }
  $1 == "replace" && $3 == "=>" && $4 ~ /^\.\/staging\/src\// { print $2 }' "$gomod" | sort -u)
(( ${#mods[@]} > 10 )) || { say "only ${#mods[@]} staging modules found in $gomod"; exit 1; }
say "${#mods[@]} staging modules pinned to $staging"

mkdir -p "$scratch/apiserver" "$scratch/out"
cd "$scratch/apiserver"
go mod init kube-assets.local/apiserver >/dev/null 2>&1
edits=()
for m in "${mods[@]}"; do edits+=("-replace=$m=$m@$staging"); done
go mod edit "${edits[@]}"
go get "k8s.io/kubernetes/cmd/kube-apiserver@$kube" >&2

stamp="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
ldflags="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $p.gitVersion=$kube -X $p.gitMajor=1 -X $p.gitMinor=$minor"
  ldflags+=" -X $p.gitTreeState=clean -X $p.buildDate=$stamp"
done
say "building kube-apiserver (cold: ~9 minutes on 2 cores)"
go build -trimpath -ldflags "$ldflags" -o "$scratch/out/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
say "kube-apiserver done after $((SECONDS - t0))s"

# etcd: the server module's root package is the etcd command. Its go.mod has
# relative replaces, so build it from a scratch module with the sibling
# modules pinned to the same version.
mkdir -p "$scratch/etcd"
cd "$scratch/etcd"
go mod init kube-assets.local/etcd >/dev/null 2>&1
go get "go.etcd.io/etcd/server/v3@$etcdv" "go.etcd.io/etcd/api/v3@$etcdv" \
       "go.etcd.io/etcd/client/pkg/v3@$etcdv" "go.etcd.io/etcd/client/v3@$etcdv" \
       "go.etcd.io/etcd/pkg/v3@$etcdv" >&2
go build -trimpath -ldflags "-s -w" -o "$scratch/out/etcd" go.etcd.io/etcd/server/v3
say "etcd done after $((SECONDS - t0))s"

mv -f "$scratch/out/kube-apiserver" "$scratch/out/etcd" "$dest/"
printf 'kubernetes %s (staging %s)\netcd %s\n%s\nbuilt %s\n' "$kube" "$staging" "$etcdv" "$(go env GOVERSION)" "$stamp" >"$dest/VERSIONS"
ready || { say "binaries in $dest fail the version check"; exit 1; }
say "ready in $((SECONDS - t0))s: $dest"
printf '%s\n' "$dest"
