# `strata logits` end to end: a prefill + decode tail gives the same argmax as one prefill,
# the .npy has the right size, and an out-of-vocabulary id is a clean error.
add_test(NAME tools_logits_cli
  COMMAND ${CMAKE_COMMAND} -DSTRATA=$<TARGET_FILE:strata> -DWORK=${CMAKE_BINARY_DIR}/tests/logits_cli
          -P ${CMAKE_CURRENT_LIST_DIR}/logits_cli/check.cmake)
set_tests_properties(tools_logits_cli PROPERTIES LABELS tools TIMEOUT 120)
