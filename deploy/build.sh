#!/usr/bin/env bash
# Configures and builds skytrain into build/ (Release, ccache when present).
set -euo pipefail
cd "$(dirname "$0")/.."
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S . -B build "${generator[@]}" -DCMAKE_BUILD_TYPE=Release
cmake --build build --parallel "$(nproc)"
