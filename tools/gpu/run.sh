#!/usr/bin/env bash
# Runs every GPU check of the bundle in one go on the GPU machine:
#   tools/gpu/run.sh RESULTS_DIR        (from a bundle: .gpu-bundle/run.sh RESULTS_DIR)
# gpu_* GoogleTest binaries (kernels, attention, whole model), then the microbenchmarks
# (gpu_bench). Writes into RESULTS_DIR: run.log (everything), figures.json (every
# "FIGURE name value" line + pass/fail per binary + commit), nvidia-smi.txt, summary.txt.
# Prints a short table last. Binaries are read from bin/ next to this script (the bundle
# layout made by tools/gpu/bundle.sh).
set -uo pipefail
out=${1:?usage: run.sh RESULTS_DIR}
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
bin=$here/bin
log=$out/run.log
: >"$log"
commit=$(cat "$here/COMMIT" 2>/dev/null || git -C "$here" rev-parse HEAD 2>/dev/null || echo unknown)
{ date -u; echo "commit $commit"; nvidia-smi; } >"$out/nvidia-smi.txt" 2>&1
status_lines=()
for t in $( [ "${STRATA_GPU_TESTS:-1}" != 0 ] && ls "$bin"/gpu_*_test ); do
  name=$(basename "$t")
  echo "=== $name" | tee -a "$log"
  start=$(date +%s)
  if timeout "${STRATA_GPU_TEST_TIMEOUT:-240}" "$t" --gtest_color=no >>"$log" 2>&1; then rc=0; else rc=$?; fi
  echo "=== $name rc=$rc ($(( $(date +%s) - start )) s)" | tee -a "$log"
  echo "STATUS $name $rc" >>"$log"
done
if [ -x "$bin/gpu_sparse_kernels_test" ] && [ "${STRATA_GPU_TESTS:-1}" != 0 ]; then
  echo "=== sparse_bench (scoring + selection + compaction vs prefill)" | tee -a "$log"
  timeout 120 "$bin/gpu_sparse_kernels_test" --gtest_also_run_disabled_tests \
    --gtest_filter='SparseBench.*' --gtest_color=no >>"$log" 2>&1
  echo "STATUS sparse_bench $?" >>"$log"
fi
if [ -x "$bin/gpu_bench" ] && [ "${STRATA_GPU_TESTS:-1}" != 0 ]; then
  echo "=== gpu_bench" | tee -a "$log"
  timeout "${STRATA_GPU_BENCH_TIMEOUT:-240}" "$bin/gpu_bench" all >>"$log" 2>&1
  echo "STATUS gpu_bench $?" >>"$log"
fi
# ---- end-to-end stages (bundles that carry bin/strata): HF references, serving benchmark ----
if [ -x "$bin/strata" ] && [ "${STRATA_GPU_E2E:-1}" != 0 ]; then
  if [ -f "$here/parity/tokenizer.json" ]; then
    echo "=== hf_tokenizer (HF tokenizers vs strata ids)" | tee -a "$log"
    timeout 180 python3 "$here/hf/tokenizer_parity_hf.py" "$here/parity/tokenizer.json" \
      "$here/parity/corpus.jsonl" "$here/parity/ids.txt" --transformers >>"$log" 2>&1
    echo "STATUS hf_tokenizer $?" >>"$log"
  fi
  if [ -x "$here/hf/validate_cpu_reference.sh" ]; then
    echo "=== hf_cpu_reference (CPU backend vs HF transformers)" | tee -a "$log"
    timeout "${STRATA_GPU_HF_TIMEOUT:-240}" "$here/hf/validate_cpu_reference.sh" /tmp/strata-hf "$bin/strata" >>"$log" 2>&1
    echo "STATUS hf_cpu_reference $?" >>"$log"
  fi
  if [ -f "$here/fp8/quantize_compressed_tensors.py" ]; then
    echo "=== hf_fp8_checkpoints (compressed-tensors FP8 checkpoints: CPU backend vs HF transformers)" | tee -a "$log"
    timeout "${STRATA_GPU_HF_TIMEOUT:-240}" python3 "$here/fp8/quantize_compressed_tensors.py" --check \
      --strata "$bin/strata" --work /tmp/strata-fp8-check >>"$log" 2>&1
    echo "STATUS hf_fp8_checkpoints $?" >>"$log"
    cp /tmp/strata-fp8-check/check.json "$out/fp8-checkpoints.json" 2>/dev/null
  fi
  if [ -d "$here/configs/bench" ] && [ "${STRATA_GPU_SERVE_BENCH:-1}" != 0 ]; then
    echo "=== serve_bench (strata bench serve, random:llama3-8b, full vs default profile)" | tee -a "$log"
    timeout "${STRATA_GPU_SERVE_TIMEOUT:-300}" "$bin/strata" bench serve \
      --server-config "$here/configs/bench/llama3-8b-full.yaml" \
      --server-config "$here/configs/bench/llama3-8b-sparse.yaml" \
      --serve-arg --set --serve-arg "model.tokenizer=$here/parity/tokenizer.json" --ready-timeout 240 \
      --input 4000 --output 500 --concurrency "${STRATA_GPU_BENCH_LEVELS:-20,64}" \
      --prompts-per-concurrency 1 --min-prompts 4 --warmup 1 --out-dir /tmp/strata-bench >>"$log" 2>&1
    echo "STATUS serve_bench $?" >>"$log"
    mkdir -p "$out/bench"
    cp /tmp/strata-bench/report.json /tmp/strata-bench/throughput.svg /tmp/strata-bench/ttft.svg "$out/bench/" 2>/dev/null
    for f in /tmp/strata-bench/server-*.log; do [ -f "$f" ] && { echo "--- $f (tail)"; tail -40 "$f"; } >>"$log"; done
  fi
fi

python3 - "$log" "$out/figures.json" "$commit" >"$out/summary.txt" <<'PY'
import json, sys, datetime
log, dst, commit = sys.argv[1:4]
figs, status, failed = {}, {}, []
for line in open(log, errors="replace"):
    p = line.split()
    if len(p) == 3 and p[0] == "FIGURE":
        figs[p[1]] = float(p[2])
    elif len(p) == 3 and p[0] == "STATUS":
        status[p[1]] = int(p[2])
    elif line.startswith("[  FAILED  ]") and "listed below" not in line:
        failed.append(line.strip())
json.dump({"date": datetime.datetime.now(datetime.timezone.utc).isoformat(), "commit": commit, "status": status,
           "failed_tests": failed, "figures": figs}, open(dst, "w"), indent=1, sort_keys=True)
print("binary                 rc")
for k, v in status.items():
    print(f"{k:22s} {v}")
for f in failed:
    print(f)
print()
for k in sorted(figs):
    if k.startswith("bench_") or k.startswith("model_") or k.startswith("graph_"):
        print(f"{k:55s} {figs[k]:.4g}")
PY
cat "$out/summary.txt"
