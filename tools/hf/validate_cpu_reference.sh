#!/usr/bin/env bash
# CPU reference backend vs Hugging Face transformers, on random fp32 models of several shapes.
#
# usage: tools/hf/validate_cpu_reference.sh OUT_DIR STRATA_BIN
#   env: PYTHON (default python3), TOL (default 1e-4), THREADS (strata logits --threads, 0 = all)
#
# For each model: `strata make-model --dtype f32` (HF and Strata read identical weights),
# random prompt ids, `strata logits` (one teacher-forced prefill on the CPU backend), then
# tools/hf/compare_logits.py (LlamaForCausalLM in fp32, and in fp64 with fp64 RoPE). Prints a
# table; exits 1 if any per-position relative L2 error exceeds TOL (or a step fails).
# Needs python3 with torch, transformers, safetensors and numpy (the GPU machine has them).
set -euo pipefail

if [[ $# -ne 2 ]]; then
  echo "usage: $0 OUT_DIR STRATA_BIN" >&2
  exit 2
fi
OUT=$1
STRATA=$(realpath "$2")
PYTHON=${PYTHON:-python3}
TOL=${TOL:-1e-4}
THREADS=${THREADS:-0}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mkdir -p "$OUT"

# name | make-model flags | prompt length
MODELS=(
  "gqa4_hd64_llama3rope_untied|--hidden 512 --heads 8 --kv-heads 2 --head-dim 64 --layers 4 --intermediate 1024 --seed 11|2048"
  "gqa8_hd128_norope_tied|--hidden 512 --heads 8 --kv-heads 1 --head-dim 128 --layers 3 --intermediate 1024 --no-llama3-rope --tie-embeddings --seed 12|1536"
  "gqa4_hd128_llama3rope_tied_shards|--hidden 256 --heads 4 --kv-heads 1 --head-dim 128 --layers 4 --intermediate 768 --tie-embeddings --shards --seed 13|2048"
  "gqa8_hd64_norope_untied|--hidden 512 --heads 16 --kv-heads 2 --head-dim 64 --layers 3 --intermediate 1408 --no-llama3-rope --seed 14|1000"
  "tiny_preset_gqa2|--preset tiny --seed 15|333"
)

fail=0
rows=()
start=$(date +%s)
for entry in "${MODELS[@]}"; do
  IFS='|' read -r name flags len <<<"$entry"
  dir="$OUT/$name"
  # shellcheck disable=SC2086
  "$STRATA" make-model --out "$dir" --dtype f32 $flags >"$OUT/$name.make.log"
  vocab=$("$PYTHON" -c "import json,sys; print(json.load(open(sys.argv[1]))['vocab_size'])" "$dir/config.json")
  "$PYTHON" - "$vocab" "$len" "$name" >"$OUT/$name.ids" <<'EOF'
import random, sys, zlib
vocab, n, name = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
rng = random.Random(zlib.crc32(name.encode()))
print(",".join(str(rng.randrange(vocab)) for _ in range(n)))
EOF
  t0=$(date +%s.%N)
  "$STRATA" logits --model "$dir" --ids-file "$OUT/$name.ids" --out "$OUT/$name.npy" \
    --threads "$THREADS" >"$OUT/$name.logits.json"
  ours_s=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  set +e
  "$PYTHON" "$HERE/compare_logits.py" "$dir" "$OUT/$name.ids" "$OUT/$name.npy" --tol "$TOL" \
    >"$OUT/$name.compare.json" 2>"$OUT/$name.compare.log"
  rc=$?
  set -e
  [[ $rc -ne 0 ]] && fail=1
  rows+=("$("$PYTHON" - "$OUT/$name.compare.json" "$name" "$len" "$ours_s" "$rc" <<'EOF'
import json, sys
path, name, n, secs, rc = sys.argv[1:6]
try:
    r = json.loads(open(path).read().strip().splitlines()[-1])
except Exception as e:  # noqa: BLE001
    r = {"error": f"no JSON output ({e})"}
if "error" in r:
    print(f"{name:36s} {n:>5s} {'-':>10s} {'-':>10s} {'-':>10s} {'-':>10s} {'-':>9s} {secs:>7s}  ERROR {r['error'][:80]}")
    sys.exit()
f32, f64 = r["refs"].get("float32", {}), r["refs"].get("float64", {})
fmt = lambda d, k: f"{d[k]:.2e}" if k in d else "-"
agree = f"{f32.get('argmax_agree', 0)}/{r['tokens']}"
status = "ok" if rc == "0" else "FAIL"
print(f"{name:36s} {n:>5s} {fmt(f32,'rel_l2_max'):>10s} {fmt(f32,'rel_l2_mean'):>10s} "
      f"{fmt(f64,'rel_l2_max'):>10s} {fmt(f64,'rel_l2_mean'):>10s} {agree:>9s} {secs:>7s}  {status} ({r['hf_rope_type']})")
EOF
)")
done

echo
echo "CPU reference vs HF transformers (relative L2 per position; tolerance $TOL)"
printf "%-36s %5s %10s %10s %10s %10s %9s %7s  %s\n" model tokens "fp32 max" "fp32 mean" \
  "fp64 max" "fp64 mean" argmax "ours s" status
for r in "${rows[@]}"; do echo "$r"; done
echo "total $(($(date +%s) - start)) s; per-model JSON in $OUT/*.compare.json"
exit $fail
