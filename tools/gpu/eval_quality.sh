#!/usr/bin/env bash
# The quality grid of docs/quality.md on the GPU machine, time-boxed:
#   tools/gpu/eval_quality.sh OUT_DIR [BUDGET_S]
# `strata eval --backend cuda` on the evaluation model (tools/evalmodel/model), in order:
#   1. calibration: 4k, 8 facts, 1 document (measures the seconds per fact);
#   2. the CPU/CUDA agreement subset: 4k, 50 facts, 1 full layer, ratios 4 and 10, seed 7
#      (docs/quality.md runs the same command on the CPU backend and compares the verdicts);
#   3. the full grid at 4k, then at 8k (window/snapkv/scored x 0/1/2 full layers x 2/4/10/20),
#      with as many facts per context (<= STRATA_EVAL_MAX_FACTS, default 1000) as the budget
#      leaves by the calibration's rate (an eval that is cut short writes nothing, so the
#      count is chosen beforehand, with a margin).
# Each run writes OUT_DIR/<name>/{eval.json, quality_table.md, *.svg} and OUT_DIR/<name>.log;
# OUT_DIR/summary.txt lists what ran. STRATA_BIN (default build/gpu-eval/strata) and
# STRATA_EVAL_MODEL (default tools/evalmodel/model) override the paths; STRATA_EVAL_ARGS is
# added to every run (e.g. "--kernel 15"), STRATA_EVAL_GRID replaces the grid's profile flags.
set -uo pipefail
out=${1:?usage: eval_quality.sh OUT_DIR [BUDGET_S]}
budget=${2:-480}
bin=${STRATA_BIN:-build/gpu-eval/strata}
model=${STRATA_EVAL_MODEL:-tools/evalmodel/model}
max_facts=${STRATA_EVAL_MAX_FACTS:-1000}
mkdir -p "$out"
start=$(date +%s)
left() { echo $((budget - ($(date +%s) - start))); }
summary=$out/summary.txt
: >"$summary"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >>"$summary" 2>&1
grid=${STRATA_EVAL_GRID:-"--policies window,snapkv,scored --full-layers 0,1,2 --ratios 2,4,10,20"}

run_eval() {  # name timeout args...
  local name=$1 limit=$2
  shift 2
  local t0
  t0=$(date +%s)
  timeout "$limit" "$bin" eval --model "$model" --backend "${STRATA_EVAL_BACKEND:-cuda}" \
    --scored-tokens 64 \
    --out-dir "$out/$name" "$@" ${STRATA_EVAL_ARGS:-} >"$out/$name.log" 2>&1
  local rc=$?
  echo "$name rc=$rc $(($(date +%s) - t0)) s: $*" | tee -a "$summary"
  return $rc
}

t0=$(date +%s)
if ! run_eval cal4k 150 --contexts 4096 --docs 1 --retrieval 8 $grid; then
  tail -20 "$out/cal4k.log"
  exit 1
fi
cal=$(($(date +%s) - t0))
per_fact=$(python3 -c "print(max(0.05, $cal / 9))")  # 8 facts + 1 document
echo "calibration: ${cal} s for 8 facts + 1 document at 4k: ${per_fact} s per case" | tee -a "$summary"

run_eval agree4k 120 --contexts 4096 --docs 0 --retrieval 50 --seed 7 \
  --policies window,snapkv,scored --full-layers 1 --ratios 4,10

# 4k takes 40 % of what is left, 8k (about twice the cost per fact) the rest, with a margin.
n4=$(python3 -c "print(max(8, min($max_facts, int(0.40 * ($(left) - 20) / $per_fact))))")
t4=$(date +%s)
[ "$(left)" -gt 60 ] && run_eval grid4k $(($(left) - 10)) --contexts 4096 --docs 4 --retrieval "$n4" $grid
# 8k: by the 4k grid's own rate (about 2.5 times the cost per fact).
per_fact=$(python3 -c "print(max(0.02, ($(date +%s) - $t4) / ($n4 + 4)))")
n8=$(python3 -c "print(max(8, min($max_facts, int(0.80 * ($(left) - 15) / (2.5 * $per_fact)))))")
if [ "$(left)" -gt 30 ]; then
  run_eval grid8k $(($(left) - 5)) --contexts 8192 --docs 4 --retrieval "$n8" $grid
fi
echo "done in $(($(date +%s) - start)) s" | tee -a "$summary"
# One archive: the GPU machine returns a limited number of files.
(cd "$out" && tar czf results.tgz cal4k agree4k grid4k grid8k *.log 2>/dev/null)
for d in grid4k grid8k agree4k; do
  [ -f "$out/$d/quality_table.md" ] && { echo "== $d"; head -5 "$out/$d/quality_table.md"; }
done
rm -rf "$out"/cal4k "$out"/agree4k "$out"/grid4k "$out"/grid8k "$out"/*.log
