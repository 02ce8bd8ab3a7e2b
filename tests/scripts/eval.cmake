# `strata eval` on the tiny model, short and bounded (label tools): it checks its own
# arithmetic (full cache vs itself must be a zero change), writes its JSON, plots and the
# docs/quality.md table; the shared-prefill run and the per-profile (from scratch) run print
# the same table; --from-json re-makes the same quality_table.md from eval.json.
if(NOT STRATA_SANITIZE STREQUAL "")
  return()
endif()
set(_eval "$<TARGET_FILE:strata> eval --model eval_tiny/model --contexts 96,128 --ratios 2,4 --policies window,snapkv,scored --full-layers 0,1 --window 8 --sinks 4 --docs 1 --retrieval 2 --scored-tokens 16 --threads 2")
add_test(NAME tools_eval_tiny
  COMMAND ${CMAKE_COMMAND} -E env
          sh -c "set -e; rm -rf eval_tiny; $<TARGET_FILE:strata> make-model --preset tiny --layers 3 --out eval_tiny/model >/dev/null; ${_eval} --out-dir eval_tiny/out > eval_tiny/shared.txt; ${_eval} --share-prefill off --out-dir eval_tiny/out2 | sed s/out2/out/ > eval_tiny/scratch.txt; cmp eval_tiny/shared.txt eval_tiny/scratch.txt; test -s eval_tiny/out/eval.json; test -s eval_tiny/out/retrieval_vs_compression.svg; test -s eval_tiny/out/followup_vs_compression.svg; grep -q '^| scored | 1 | 4 |' eval_tiny/out/quality_table.md; $<TARGET_FILE:strata> eval --from-json eval_tiny/out/eval.json --out-dir eval_tiny/json >/dev/null; head -n 16 eval_tiny/out/quality_table.md > eval_tiny/a.md; head -n 16 eval_tiny/json/quality_table.md > eval_tiny/b.md; cmp eval_tiny/a.md eval_tiny/b.md"
  WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
set_tests_properties(tools_eval_tiny PROPERTIES LABELS tools TIMEOUT 300)

# Explicit full-layer lists and the pooling kernel: one row per list, labelled; an even kernel
# is refused.
set(_eval_lists "$<TARGET_FILE:strata> eval --model eval_lists/model --contexts 96 --ratios 2 --policies scored --full-layer-lists 1\\;0+2 --kernel 3 --window 8 --sinks 4 --docs 1 --retrieval 2 --scored-tokens 16 --threads 2")
add_test(NAME tools_eval_tiny_layer_lists
  COMMAND ${CMAKE_COMMAND} -E env
          sh -c "set -e; rm -rf eval_lists; $<TARGET_FILE:strata> make-model --preset tiny --layers 3 --out eval_lists/model >/dev/null; ${_eval_lists} --out-dir eval_lists/out >/dev/null; grep -q '^| scored | layers 1 | 2 |' eval_lists/out/quality_table.md; grep -q '^| scored | layers 0+2 | 2 |' eval_lists/out/quality_table.md; grep -q '\"full_layer_list\":\"0+2\"' eval_lists/out/eval.json; if ${_eval_lists} --kernel 4 --out-dir eval_lists/bad 2>/dev/null; then exit 1; fi"
  WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
set_tests_properties(tools_eval_tiny_layer_lists PROPERTIES LABELS tools TIMEOUT 120)

# --compare: an fp8 run against the unquantized one on the same inputs, row by row (Δppl,
# greedy agreement from the stored argmaxes, retrieval paired differences); a run against
# itself is a zero change with 100 % agreement; a single path is refused.
set(_eval_cmp "$<TARGET_FILE:strata> eval --model eval_cmp/model --contexts 96 --ratios 2 --policies scored --full-layers 1 --window 8 --sinks 4 --docs 1 --retrieval 2 --scored-tokens 16 --threads 2")
add_test(NAME tools_eval_tiny_compare
  COMMAND ${CMAKE_COMMAND} -E env
          sh -c "set -e; rm -rf eval_cmp; $<TARGET_FILE:strata> make-model --preset tiny --layers 3 --out eval_cmp/model >/dev/null; ${_eval_cmp} --out-dir eval_cmp/a >/dev/null; ${_eval_cmp} --quantization fp8 --out-dir eval_cmp/b >/dev/null; $<TARGET_FILE:strata> eval --compare eval_cmp/a/eval.json,eval_cmp/b/eval.json --out-dir eval_cmp/c > eval_cmp/c.txt; grep -q '^scored ' eval_cmp/c.txt; grep -q '\"agreement_positions\":16' eval_cmp/c/compare.json; $<TARGET_FILE:strata> eval --compare eval_cmp/a/eval.json,eval_cmp/a/eval.json --out-dir eval_cmp/d > eval_cmp/d.txt; test $(grep -c '+0.00%   100.0%' eval_cmp/d.txt) = 2; if $<TARGET_FILE:strata> eval --compare eval_cmp/a/eval.json --out-dir eval_cmp/e 2>/dev/null; then exit 1; fi"
  WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
set_tests_properties(tools_eval_tiny_compare PROPERTIES LABELS tools TIMEOUT 120)

# --policies none: the full cache only (fp8 KV against bf16 KV where a backend has no sparse
# layers for e4m3 pages): one row, compared row by row; none beside a policy is refused.
set(_eval_full "$<TARGET_FILE:strata> eval --model eval_full/model --contexts 96 --ratios 2 --policies none --window 8 --sinks 4 --docs 1 --retrieval 2 --scored-tokens 16 --threads 2")
add_test(NAME tools_eval_tiny_full_cache_only
  COMMAND ${CMAKE_COMMAND} -E env
          sh -c "set -e; rm -rf eval_full; $<TARGET_FILE:strata> make-model --preset tiny --layers 3 --out eval_full/model >/dev/null; ${_eval_full} --out-dir eval_full/a >/dev/null; ${_eval_full} --kv-dtype fp8 --out-dir eval_full/b >/dev/null; $<TARGET_FILE:strata> eval --compare eval_full/a/eval.json,eval_full/b/eval.json --out-dir eval_full/c > eval_full/c.txt; grep -q '^compare: 1 rows' eval_full/c.txt; grep -q '^full ' eval_full/c.txt; if ${_eval_full} --policies none,scored --out-dir eval_full/bad 2>/dev/null; then exit 1; fi"
  WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
set_tests_properties(tools_eval_tiny_full_cache_only PROPERTIES LABELS tools TIMEOUT 120)
