#!/usr/bin/env bash
# Installs the Debian packages this project builds and runs with. Idempotent: when
# every package is already installed it touches nothing and takes well under a second.
# Nothing else is downloaded, ever: the build uses only these packages and the CUDA
# toolkit already present on the machine (optional).
set -euo pipefail

packages=(
  # toolchain
  cmake ninja-build pkg-config g++
  # numerics core
  libopenblas-dev libabsl-dev
  # control plane and engine
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libyaml-cpp-dev libsqlite3-dev libssl-dev libgloo-dev libcpp-httplib-dev libcli11-dev
  nlohmann-json3-dev libspdlog-dev prometheus-cpp-dev
  # tokenizers: SentencePiece's library (and its spm_* tools for users)
  libsentencepiece-dev sentencepiece
  # tests and benchmarks
  libgtest-dev libgmock-dev libbenchmark-dev openssl
  # the exported model's parity test against Hugging Face's Llama equations (tests/hf)
  python3-torch
  # metrics checks and the local stack's Prometheus (promtool, prometheus); the helm binary
  # ships zipped inside an npm package (scripts/install_deploy_tools.sh)
  prometheus unzip curl
  # the container image (scripts/build_image.sh) and its tests: a Debian root filesystem
  # from packages, and podman to import and run it (runc: crun fails on these machines);
  # podman's recommends that rootful containers, pods and a network need, named because
  # recommends are not installed
  mmdebstrap podman runc netavark aardvark-dns iptables catatonit
  # the shells whose completion fp8ctl writes (its tests run them); librsvg, which fp8ctl
  # opens to write a plot as PNG
  zsh fish librsvg2-2
  # the demo and test corpus: the King James Bible as text (scripts/install_corpus.sh)
  bible-kjv
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  exit 0
fi

echo "bootstrap: installing ${missing[*]}" >&2
sudo=""
if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
