# tools/gpu/guardrail_vs_eval.sh end to end on the tiny CPU model (label tools): the live
# guardrail (`strata serve`, sample_rate 1, /admin/api/quality) against `strata eval
# --guardrail-agreement` on the same prompts. On the CPU backend both sides are deterministic
# (every row computed with the same arithmetic whatever the chunking and batching), so the
# counts must be equal (STRATA_GUARDRAIL_EXACT=1), and profile B (capacity 16 of 96-token
# prompts) must score below 100 %, else the comparison would be vacuous.
if(NOT STRATA_SANITIZE STREQUAL "")
  return()
endif()
add_test(NAME tools_guardrail_vs_eval_tiny
  COMMAND ${CMAKE_COMMAND} -E env STRATA_BIN=$<TARGET_FILE:strata> STRATA_BACKEND=cpu
          STRATA_GUARDRAIL_CONFIG=${CMAKE_SOURCE_DIR}/configs/tiny-cpu.yaml
          STRATA_GUARDRAIL_MODEL=guardrail_tiny/model STRATA_GUARDRAIL_CONTEXT=96
          STRATA_GUARDRAIL_DOCS=4 STRATA_GUARDRAIL_TOKENS=16
          STRATA_GUARDRAIL_SETS_B=sparsity.capacity=16 STRATA_GUARDRAIL_EXACT=1
          sh -c "set -e; rm -rf guardrail_tiny; $<TARGET_FILE:strata> make-model --preset tiny --layers 3 --out guardrail_tiny/model >/dev/null; ${CMAKE_SOURCE_DIR}/tools/gpu/guardrail_vs_eval.sh guardrail_tiny/out; test $(grep -c equal guardrail_tiny/out/table.txt) = 2; grep -q '\"ok\":true' guardrail_tiny/out/guardrail_vs_eval.json; if grep -q '^B  *1.0000 ' guardrail_tiny/out/table.txt; then echo 'profile B scored 100 %'; exit 1; fi"
  WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
set_tests_properties(tools_guardrail_vs_eval_tiny PROPERTIES LABELS tools TIMEOUT 120 RESOURCE_LOCK strata_api_server)
