#!/usr/bin/env bash
# Builds the GPU test binaries and gpu_bench (build/cuda, sm_90) and copies them with
# run.sh into .gpu-bundle/ (git-ignored). On the GPU machine: .gpu-bundle/run.sh "$OUT".
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${STRATA_CUDA_BUILD:-build/cuda}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null
targets=(gpu_bench)
for f in tests/gpu/*_test.cpp; do targets+=("gpu_$(basename "$f" .cpp)"); done
# Other helpers' gpu_* tests are built best-effort (-k 0); ours must exist afterwards.
cmake --build "$build" --target "${targets[@]}" -j "${STRATA_JOBS:-2}" -- -k 0 || true
for t in gpu_bench gpu_kernels_test gpu_attention_test gpu_model_test gpu_sparse_model_test; do
  [ -x "$build/cuda/$t" ] || [ -x "$build/tests/$t" ] || { echo "bundle: $t did not build" >&2; exit 1; }
done
rm -rf .gpu-bundle
mkdir -p .gpu-bundle/bin
cp tools/gpu/run.sh .gpu-bundle/
git rev-parse HEAD >.gpu-bundle/COMMIT
git status --porcelain -- cuda tests/gpu tools/gpu | sed 's/^/dirty: /' >>.gpu-bundle/COMMIT || true
cp "$build"/cuda/gpu_bench .gpu-bundle/bin/
for f in tests/gpu/*_test.cpp; do
  b="$build/tests/gpu_$(basename "$f" .cpp)"
  if [ -x "$b" ]; then cp "$b" .gpu-bundle/bin/; else echo "bundle: skipping $(basename "$b") (not built)"; fi
done
strip .gpu-bundle/bin/* 2>/dev/null || true
du -sh .gpu-bundle
