#!/usr/bin/env bash
# One command from a fresh clone to a tested build: install dependencies, build (CUDA code is
# compiled when nvcc exists), run every CPU test with CTest.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/install-deps.sh"
"$root/scripts/build.sh" default
cd "$root"
ctest --preset default -L cpu
