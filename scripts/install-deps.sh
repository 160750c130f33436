#!/usr/bin/env bash
# Installs what orchid needs to build and test on Debian 12: compilers, CMake/Ninja, ccache,
# and the libraries in docs/deps.md; then the npm test packages if package.json exists.
# Idempotent: packages already present are skipped, so a second run takes seconds.
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache git pkg-config
  clang libclang-rt-14-dev clang-format
  nlohmann-json3-dev libcli11-dev libgtest-dev libgmock-dev
  libpcre2-dev libutf8proc-dev libcpp-httplib-dev zlib1g-dev
  python3 python3-jinja2
)

sudo_cmd=""
[[ $(id -u) -eq 0 ]] || sudo_cmd="sudo"

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

# Node.js + npm run the reference tokenizer tests. Some machines carry a Node.js build that
# bundles npm (and conflicts with Debian's npm package), so install them only when absent.
command -v node >/dev/null || missing+=(nodejs)
command -v npm >/dev/null || missing+=(npm)

if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $sudo_cmd apt-get update -qq
  $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "install-deps: Debian packages present"
fi

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ -f "$root/package.json" ]]; then
  # npm ci is skipped when node_modules already matches the lock file.
  if ! cmp -s "$root/package-lock.json" "$root/node_modules/.package-lock.json" 2>/dev/null; then
    (cd "$root" && npm ci --no-audit --no-fund --loglevel=error)
  fi
fi
