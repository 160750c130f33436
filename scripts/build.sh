#!/usr/bin/env bash
# Configures and builds a CMake preset (default: "default" = Release, CUDA compiled when nvcc
# exists), optionally only some targets. nvcc lives in /usr/local/cuda/bin on the project's
# machines, often off PATH.   scripts/build.sh [PRESET [TARGET...]]
set -euo pipefail
preset="${1:-default}"
shift || true
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/orchid-ccache}"
cmake --preset "$preset" >/dev/null
targets=()
for t in "$@"; do targets+=(--target "$t"); done
cmake --build --preset "$preset" "${targets[@]}"
