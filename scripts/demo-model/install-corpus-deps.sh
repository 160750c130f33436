#!/usr/bin/env bash
# The Debian packages the demo model's corpus is made from (scripts/demo-model/make_corpus.py;
# licences in docs/demo-model.md). Only needed to rebuild the demo model, not to build or test.
set -euo pipefail
packages=(wordnet-base python3.11-doc fortunes fortunes-min python3-jinja2)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
((${#missing[@]})) || exit 0
sudo_cmd=""
[[ $(id -u) -eq 0 ]] || sudo_cmd="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo_cmd apt-get update -q
$sudo_cmd apt-get install -y -q "${missing[@]}"
