#!/bin/sh
# Usage: cuda_hopper_sass.sh FILE... (objects, libraries or executables holding the sm_90a
# Hopper prefill attention kernel, e.g. build/release/tests/gpu_attention_test).
# Every prefill_attention_hopper_kernel function in the SASS must contain HGMMA; prints the
# HGMMA and local-memory (LDL/STL, spill) counts per instantiation. Exit 77 (skip) when no
# cuobjdump is found ($CUOBJDUMP, else PATH, else /usr/local/cuda/bin).
tool="${CUOBJDUMP:-}"
case "$tool" in *NOTFOUND) tool="" ;; esac
[ -n "$tool" ] || tool=$(command -v cuobjdump 2>/dev/null || true)
[ -n "$tool" ] || { [ -x /usr/local/cuda/bin/cuobjdump ] && tool=/usr/local/cuda/bin/cuobjdump; }
if [ -z "$tool" ] || [ ! -x "$tool" ]; then
  echo "SKIP: cuobjdump not found (set CUOBJDUMP)"
  exit 77
fi
status=0
for f in "$@"; do
  sass=$("$tool" --dump-sass "$f") || { echo "cuobjdump --dump-sass $f failed"; exit 1; }
  printf '%s\n' "$sass" | awk -v file="$f" '
    /Function :/ { fn = $3; if (fn ~ /prefill_attention_hopper_kernel/ && !(fn in hg)) { hg[fn] = 0; lm[fn] = 0; order[n++] = fn } next }
    fn ~ /prefill_attention_hopper_kernel/ && /HGMMA/ { hg[fn]++ }
    fn ~ /prefill_attention_hopper_kernel/ && /[[:space:]](LDL|STL)(\.|[[:space:]])/ { lm[fn]++ }
    END {
      if (n == 0) { print file ": no prefill_attention_hopper_kernel in the SASS"; exit 1 }
      bad = 0
      for (i = 0; i < n; i++) {
        f = order[i]
        printf "%s: %d HGMMA, %d LDL/STL\n", f, hg[f], lm[f]
        if (hg[f] == 0) bad = 1
      }
      exit bad
    }' || status=1
done
[ "$status" -eq 0 ] && echo "OK: HGMMA in every Hopper prefill kernel"
exit "$status"
