#!/usr/bin/env bash
# Builds and starts `strata serve` on the demo: the evaluation model (tools/evalmodel/model,
# committed; docs/quality.md) with configs/demo-{cpu,cuda}.yaml — the CUDA backend when a GPU
# is present, else the CPU backend. STRATA_DEMO=tiny serves the tiny random model instead
# (made if absent; configs/tiny-*.yaml), STRATA_MODEL=DIR any model with the tiny configs.
# Extra arguments go to `strata serve`.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/deps.sh build
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)" --target strata
bin=build/release/bin/strata
kind=cpu
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  kind=cuda
fi
if [ "${STRATA_DEMO:-eval}" = tiny ] || [ -n "${STRATA_MODEL:-}" ]; then
  model=${STRATA_MODEL:-build/models/tiny}
  if [ ! -f "$model/config.json" ]; then
    "$bin" make-model --preset tiny --out "$model"
  fi
  exec "$bin" serve --config "configs/tiny-$kind.yaml" --model "$model" "$@"
fi
exec "$bin" serve --config "configs/demo-$kind.yaml" "$@"
