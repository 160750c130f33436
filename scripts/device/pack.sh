#!/usr/bin/env bash
# Builds here (nvcc compiles the sm_90a kernels) and stages what the GPU machine needs in
# .device/ (ignored by git; name it in the device tool's `carry`): the binaries and the shared
# libraries that machine's image lacks (libdw / libelf: for its Nsight Systems importer). Then run
# scripts/device/run.sh there.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
grep -qx '/.device/' .git/info/exclude 2>/dev/null || echo '/.device/' >> .git/info/exclude
scripts/build.sh default orchid orchid_cuda_tests orchid_gemv_lab
rm -rf .device && mkdir -p .device/bin .device/lib
cp build/orchid build/orchid_cuda_tests build/orchid_gemv_lab .device/bin/
for lib in libpcre2-8.so.0 libutf8proc.so.2 libdw.so.1 libelf.so.1; do
  cp -L "/lib/x86_64-linux-gnu/$lib" .device/lib/
done
# The commit the binaries come from (+dirty with uncommitted changes): the bench JSONs' "commit"
# (`orchid bench` reads ../commit beside its bin/; that machine's copy of the tree has no current
# git HEAD).
{ git rev-parse --short HEAD; git diff --quiet HEAD || echo dirty; } | paste -sd+ > .device/commit
# The device tool carries at most 64 MiB with the tree: binaries travel stripped and xz-packed
# (12.7 MB for orchid against gzip's 21.6; run.sh unpacks).
strip .device/bin/*
xz -9 -T2 .device/bin/*
du -sh .device
