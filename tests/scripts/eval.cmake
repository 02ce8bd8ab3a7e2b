# `strata eval` on the tiny model, short and bounded (label tools): it checks its own
# arithmetic (full cache vs itself must be a zero change) and writes its JSON and plot.
if(NOT STRATA_SANITIZE STREQUAL "")
  return()
endif()
add_test(NAME tools_eval_tiny
  COMMAND ${CMAKE_COMMAND} -E env
          sh -c "rm -rf eval_tiny && $<TARGET_FILE:strata> make-model --preset tiny --layers 3 --out eval_tiny/model >/dev/null && $<TARGET_FILE:strata> eval --model eval_tiny/model --contexts 96 --ratios 2,4 --policies window,scored --full-layers 0,1 --window 8 --sinks 4 --docs 1 --retrieval 2 --scored-tokens 16 --threads 2 --out-dir eval_tiny/out && test -s eval_tiny/out/eval.json && test -s eval_tiny/out/retrieval_vs_compression.svg"
  WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
set_tests_properties(tools_eval_tiny PROPERTIES LABELS tools TIMEOUT 300)
