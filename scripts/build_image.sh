#!/usr/bin/env bash
# Builds the container image the Helm chart runs, with no registry: a Debian 12 root
# filesystem made by mmdebstrap from Debian's packages (deploy/image/runtime-packages),
# the binaries of build/release/bin, a non-root user (uid and gid 65532, as the chart's
# securityContext), imported into podman's local image store.
#
#   scripts/build_image.sh [--cuda] [--tag TAG] [--save FILE] [--context DIR]
#
#   --cuda       also the CUDA libraries the GPU path opens (cuBLASLt, NCCL) from the
#                installed toolkit; tag <appVersion>-cuda. The driver (libcuda) comes from
#                the node, through the NVIDIA container toolkit.
#   --tag TAG    the image's name (default localhost/fp8-train:<appVersion>[-cuda], what
#                deploy/helm/fp8's values name).
#   --save FILE  also write the image as an OCI archive, for `kind load image-archive`,
#                `ctr images import` or `podman load` elsewhere.
#   --context DIR  write deploy/image/Containerfile's build context to DIR instead (the
#                same binaries, package list and libraries), for `podman build` or
#                `docker build` with a registry; no image is built here then.
#
# Builds the binaries first when build/release lacks them (scripts/build.sh release).
# Needs root (mmdebstrap, podman): scripts/bootstrap.sh installs mmdebstrap, podman, runc.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

fail() {
  echo "build_image: $*" >&2
  exit 1
}

cuda=0
tag=
save=
context=
while (($#)); do
  case $1 in
    --cuda) cuda=1; shift ;;
    --tag) [[ $# -ge 2 ]] || fail "--tag needs a value"; tag=$2; shift 2 ;;
    --save) [[ $# -ge 2 ]] || fail "--save needs a file"; save=$2; shift 2 ;;
    --context) [[ $# -ge 2 ]] || fail "--context needs a folder"; context=$2; shift 2 ;;
    -h | --help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) fail "unknown argument '$1' (see --help)" ;;
  esac
done

version=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' deploy/helm/fp8/Chart.yaml)
[[ -n $version ]] || fail "no appVersion in deploy/helm/fp8/Chart.yaml"
suffix=
((cuda)) && suffix=-cuda
tag=${tag:-localhost/fp8-train:$version$suffix}

tools=(mmdebstrap podman)
[[ -n $context ]] && tools=()
for tool in "${tools[@]}"; do
  command -v "$tool" >/dev/null || fail "$tool is not installed: run scripts/bootstrap.sh"
done

bin=$root/build/release/bin
binaries=(fp8-coordinator fp8-worker fp8-train fp8ctl fp8-data fp8-model)
for b in "${binaries[@]}"; do
  [[ -x $bin/$b ]] || { scripts/build.sh release; break; }
done
for b in "${binaries[@]}"; do
  [[ -x $bin/$b ]] || fail "$bin/$b was not built"
done

cuda_libraries=()
if ((cuda)); then
  # The libraries the GPU path dlopens (cuBLASLt, NCCL); cudart is linked statically.
  for name in libcublasLt.so.13 libnccl.so.2; do
    found=
    for dir in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib; do
      [[ -e $dir/$name ]] && { found=$(readlink -f "$dir/$name"); break; }
    done
    [[ -n $found ]] || fail "--cuda: $name is not in the CUDA toolkit under /usr/local/cuda"
    cuda_libraries+=("$found")
  done
fi

if [[ -n $context ]]; then
  mkdir -p "$context"
  rm -rf "$context/bin" "$context/cuda"
  mkdir -p "$context/bin" "$context/cuda"
  cp "${binaries[@]/#/$bin/}" "$context/bin/"
  for f in "${cuda_libraries[@]}"; do cp "$f" "$context/cuda/"; done
  cp deploy/image/Containerfile deploy/image/runtime-packages deploy/image/customize.sh "$context/"
  echo "build_image: build context in $context (podman build -t fp8-train:$version$suffix $context)"
  exit 0
fi

packages=$(grep -v '^\s*#' deploy/image/runtime-packages | grep -v '^\s*$' | paste -sd, -)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/bin" "$work/cuda"
cp "${binaries[@]/#/$bin/}" "$work/bin/"
for f in "${cuda_libraries[@]}"; do cp "$f" "$work/cuda/"; done
# The same packages the binaries were built against: the host's own apt sources.
sources=/etc/apt/sources.list.d/debian.sources
[[ -f $sources ]] || sources=/etc/apt/sources.list
# A fixed timestamp for every file, so that the same inputs make the same layer.
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}

echo "build_image: root filesystem from Debian 12 packages ($packages)"
mmdebstrap --variant=essential --include="$packages" \
  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
  --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
  --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  --customize-hook="copy-in $work/bin/. /usr/local/bin" \
  --customize-hook="mkdir -p \"\$1/usr/local/lib/fp8-cuda\"" \
  --customize-hook="copy-in $work/cuda/. /usr/local/lib/fp8-cuda" \
  --customize-hook='sh "'"$root"'/deploy/image/customize.sh" "$1"' \
  bookworm "$work/rootfs.tar" "$sources" >"$work/mmdebstrap.log" 2>&1 ||
  fail "mmdebstrap failed: $(tail -20 "$work/mmdebstrap.log")"

echo "build_image: importing as $tag"
podman import --quiet \
  --change 'USER=65532:65532' --change 'WORKDIR=/var/lib/fp8' \
  --change 'ENV=PATH=/usr/local/bin:/usr/bin:/bin' \
  --change 'CMD=["fp8ctl","--help"]' \
  --change "LABEL=org.opencontainers.image.title=fp8-train" \
  --change "LABEL=org.opencontainers.image.version=$version" \
  --change "LABEL=org.opencontainers.image.source=deploy/image" \
  "$work/rootfs.tar" "$tag" >/dev/null
size=$(podman image inspect --format '{{.Size}}' "$tag")
echo "build_image: $tag, $((size / 1000000)) MB"
if [[ -n $save ]]; then
  rm -f "$save"
  podman save --quiet --format oci-archive -o "$save" "$tag"
  echo "build_image: saved to $save"
fi
