#!/usr/bin/env bash
# Installs what skytrain needs, builds it and runs every test (CTest).
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/install-deps.sh
bash deploy/build.sh
ctest --test-dir build --output-on-failure --timeout 600
