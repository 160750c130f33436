#!/usr/bin/env bash
# The main job on the built-in demo model: install, build, make the demo checkpoint (a small
# random model of the real architecture, MLX 4-bit) if it is not there, describe it, and
# generate from a prompt of token ids.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/install-deps.sh"
"$root/scripts/build.sh" default
demo="$root/build/demo-model"
[[ -f "$demo/config.json" ]] || "$root/build/orchid" synth --config tiny --layout mlx4 -o "$demo"
"$root/build/orchid" info -m "$demo"
echo
echo "orchid generate -m $demo --tokens 1,2,3,4,5 -n 32 --greedy --json"
"$root/build/orchid" generate -m "$demo" --tokens 1,2,3,4,5 -n 32 --greedy --json
