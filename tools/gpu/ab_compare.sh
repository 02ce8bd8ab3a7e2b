#!/usr/bin/env bash
# A/B check of a refactor on the GPU machine: the GPU tests of build B, then the backend-level
# benchmarks of builds A and B alternated (A B A B ...), so drift of the machine hits both alike:
#   bash tools/gpu/ab_compare.sh OUT_DIR A_BIN_DIR B_BIN_DIR
# Each BIN_DIR holds gpu_bench and strata (B_BIN_DIR also the gpu_*_test binaries; a bundle's bin/
# made by tools/gpu/bundle.sh). Runs:
#   1. every B_BIN_DIR/gpu_*_test (STRATA_AB_TESTS=0 skips them), timeout STRATA_AB_TEST_S each;
#   2. STRATA_AB_ROUNDS (default 2) rounds of `gpu_bench SUB` for SUB in STRATA_AB_BENCH
#      (default "model sparse": the decode step and prefill of the Llama-3-8B shape through
#      CudaBackend::step, and the sparse vs full decode step), A then B;
#   3. STRATA_AB_HOST_ROUNDS (default 5) rounds of `strata bench host --preset llama3-8b --batch
#      64 --context 4096 --steps 600`, full cache and the default profile, A then B (it needs the
#      Llama-3 tokenizer.json: STRATA_AB_TOKENIZER, default the bundle's parity/tokenizer.json).
# Writes OUT_DIR/tests.log, bench-a.log, bench-b.log, host.log and ab.txt: every FIGURE of
# gpu_bench and every us/step stage of bench host as the median over rounds for A and B, with
# B / A. Exit status: 1 if a test binary failed, else 0.
set -uo pipefail
out=${1:?usage: ab_compare.sh OUT_DIR A_BIN_DIR B_BIN_DIR}
a=${2:?A_BIN_DIR}
b=${3:?B_BIN_DIR}
mkdir -p "$out"
rc_all=0
{ date -u; nvidia-smi --query-gpu=name,memory.used,clocks.sm --format=csv; } >"$out/tests.log" 2>&1
if [ "${STRATA_AB_TESTS:-1}" != 0 ]; then
  for t in "$b"/gpu_*_test; do
    name=$(basename "$t")
    start=$(date +%s)
    timeout "${STRATA_AB_TEST_S:-240}" "$t" --gtest_color=no >>"$out/tests.log" 2>&1
    rc=$?
    [ $rc = 0 ] || rc_all=1
    echo "=== $name rc=$rc ($(($(date +%s) - start)) s)" | tee -a "$out/tests.log"
  done
fi
for r in $(seq 1 "${STRATA_AB_ROUNDS:-2}"); do
  for sub in ${STRATA_AB_BENCH-model sparse}; do
    for side in a b; do
      dir=$a
      [ $side = b ] && dir=$b
      echo "=== round $r gpu_bench $sub" >>"$out/bench-$side.log"
      timeout 120 "$dir/gpu_bench" "$sub" >>"$out/bench-$side.log" 2>&1
      echo "=== rc=$?" >>"$out/bench-$side.log"
    done
  done
  echo "gpu_bench round $r done ($(date -u +%T))"
done
sparse_cfg=
for c in configs/bench/llama3-8b-sparse.yaml "$b/../configs/bench/llama3-8b-sparse.yaml"; do
  [ -f "$c" ] && sparse_cfg=$c && break
done
tok=${STRATA_AB_TOKENIZER:-$b/../parity/tokenizer.json}
host_args=()
[ -f "$tok" ] && host_args=(--tokenizer "$tok")
for r in $(seq 1 "${STRATA_AB_HOST_ROUNDS:-5}"); do
  for side in a b; do
    dir=$a
    [ $side = b ] && dir=$b
    echo "=== round $r side $side full" >>"$out/host.log"
    "$dir/strata" bench host --preset llama3-8b --batch 64 --context 4096 --steps 600 \
      "${host_args[@]}" >>"$out/host.log" 2>&1
    if [ -n "$sparse_cfg" ]; then
      echo "=== round $r side $side sparse" >>"$out/host.log"
      "$dir/strata" bench host --preset llama3-8b --batch 64 --context 4096 --steps 600 \
        --config "$sparse_cfg" "${host_args[@]}" >>"$out/host.log" 2>&1
    fi
  done
done
python3 - "$out" <<'EOF' | tee "$out/ab.txt"
import re, statistics, sys
out = sys.argv[1]
def lines(path):
    try:
        return open(path, errors="replace").readlines()
    except FileNotFoundError:
        return []
def figures(path):
    vals = {}
    for line in lines(path):
        m = re.match(r"FIGURE (\S+) ([-0-9.eE+]+)", line)
        if m:
            vals.setdefault(m.group(1), []).append(float(m.group(2)))
    return vals
fa, fb = figures(f"{out}/bench-a.log"), figures(f"{out}/bench-b.log")
print(f"{'gpu_bench figure (median of rounds)':58s} {'A':>12s} {'B':>12s} {'B/A':>7s}")
for k in fa:
    if k in fb:
        ma, mb = statistics.median(fa[k]), statistics.median(fb[k])
        ratio = mb / ma if ma else float("nan")
        print(f"{k:58s} {ma:12.4g} {mb:12.4g} {ratio:7.3f}")
host = {}
side = cfg = None
for line in lines(f"{out}/host.log"):
    m = re.match(r"=== round \d+ side (\w) (\w+)", line)
    if m:
        side, cfg = m.group(1), m.group(2)
        continue
    m = re.match(r"(\S.*?\S)\s{2,}([0-9.]+)$", line.rstrip())
    if m and side:
        host.setdefault((cfg, m.group(1)), {}).setdefault(side, []).append(float(m.group(2)))
print(f"\n{'bench host, us/step (median of rounds)':58s} {'A':>12s} {'B':>12s} {'B/A':>7s}")
for (cfg, stage), v in host.items():
    if "a" in v and "b" in v:
        ma, mb = statistics.median(v["a"]), statistics.median(v["b"])
        print(f"{(cfg + ': ' + stage):58s} {ma:12.1f} {mb:12.1f} {mb / ma if ma else 0:7.3f}")
EOF
exit $rc_all
