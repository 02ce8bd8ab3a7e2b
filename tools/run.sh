#!/usr/bin/env bash
# Builds, makes the tiny demo model if absent and starts `strata serve` on it (the CUDA
# backend when a GPU is present, else the CPU backend). Extra arguments go to `strata serve`.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/deps.sh build
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)" --target strata
bin=build/release/bin/strata
model=${STRATA_MODEL:-build/models/tiny}
if [ ! -f "$model/config.json" ]; then
  "$bin" make-model --preset tiny --out "$model"
fi
config=configs/tiny-cpu.yaml
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  config=configs/tiny-cuda.yaml
fi
exec "$bin" serve --config "$config" --model "$model" "$@"
