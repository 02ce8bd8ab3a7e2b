# Tensor-parallel CLI flags end to end (docs/tensor-parallel.md): `strata generate` greedy text
# and teacher-forced logits at --tp-size 2 equal --tp-size 1 (CPU ranks in one process); a rank
# whose master never shows up stopping with a message; two processes (--tp-rank/--tp-master)
# giving the same greedy text and logits; a follower whose rank 0 is killed exiting.
add_test(NAME tools_tp_cli
  COMMAND ${CMAKE_COMMAND} -DSTRATA=$<TARGET_FILE:strata> -DWORK=${CMAKE_BINARY_DIR}/tests/tp_cli
          -P ${CMAKE_CURRENT_LIST_DIR}/tp_cli/check.cmake)
set_tests_properties(tools_tp_cli PROPERTIES LABELS tools TIMEOUT 240)
