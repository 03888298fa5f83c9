#!/usr/bin/env bash
# The headline benchmarks on the emulated WAN: tables a, b and c (see deploy/wan/bench.py).
# Usage (root): bash deploy/bench.sh [steps] [batch]   — builds first.
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/build.sh > /dev/null
python3 deploy/wan/bench.py "$@"
