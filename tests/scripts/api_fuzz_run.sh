#!/usr/bin/env bash
# Runs a libFuzzer binary for SECONDS over a fresh working corpus seeded from SEEDS and
# prints the execution count. Usage: tests/scripts/api_fuzz_run.sh BIN WORKDIR SEEDS SECONDS
set -euo pipefail
bin=$1 work=$2 seeds=$3 secs=$4
rm -rf "$work" && mkdir -p "$work/corpus" "$work/artifacts"
"$bin" -max_total_time="$secs" -max_len=4096 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
  -artifact_prefix="$work/artifacts/" "$work/corpus" "$seeds" 2>"$work/log" || {
  tail -50 "$work/log"; echo "fuzz_run: the fuzzer found a problem (artifacts in $work/artifacts)"; exit 1; }
grep -E "stat::number_of_executed_units|Done [0-9]+ runs" "$work/log" | tail -2
