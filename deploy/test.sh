#!/usr/bin/env bash
# Installs what skytrain needs, builds it and runs every test (CTest).
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/install-deps.sh
bash deploy/build.sh
ctest --test-dir build --output-on-failure --timeout 600
# Every parser that takes bytes from a socket or a file, fuzzed for a bounded time (a crash
# fails the run): docs/security.md.
bash deploy/fuzz.sh "${SKYTRAIN_FUZZ_SECONDS:-60}"
