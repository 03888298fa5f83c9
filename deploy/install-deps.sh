#!/usr/bin/env bash
# Installs everything skytrain needs to build, test and run its demo on Debian 12.
# Idempotent: apt-get only, safe to run again. Needs root (or sudo). Extra packages given as
# arguments are installed too (deploy/fuzz.sh: clang and libFuzzer).
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config git
  libtorch-dev libopenblas0-pthread
  libzmq3-dev cppzmq-dev libsodium-dev
  nlohmann-json3-dev libcli11-dev catch2
  prometheus-cpp-dev prometheus  # /metrics, and a real Prometheus for its test
  libgloo-dev libsentencepiece-dev sentencepiece libspdlog-dev libsystemd-dev libxxhash-dev libzstd-dev
  diatheke sword-text-web sword-text-sparv  # the English and Spanish Bibles
  systemd iproute2 procps python3
  dpkg-dev file  # cpack -G DEB: dpkg-shlibdeps for the package's Depends, file to find ELF files
  python3-torch  # tests and the example: TorchScript models exported from Python
  python3-zmq  # operations_test: a hostile client speaking the control protocol itself
  nftables  # bench/peer_compare.sh: Gloo's connections through a delay relay; chaos_test's partition
  "$@"
)

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages already installed"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -q
"${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
