# `strata bench serve` against `strata serve` on the tiny CPU model: a short sweep whose
# counted requests and tokens must equal the server's own /metrics counters (label tools).
if(NOT STRATA_SANITIZE STREQUAL "")
  return()
endif()
add_test(NAME tools_bench_vs_metrics
  COMMAND ${CMAKE_COMMAND} -DSTRATA=$<TARGET_FILE:strata> -DSRC=${CMAKE_SOURCE_DIR}
          -DWORK=${CMAKE_BINARY_DIR}/bench_vs_metrics -P ${CMAKE_SOURCE_DIR}/tests/scripts/bench/bench_vs_metrics.cmake)
set_tests_properties(tools_bench_vs_metrics PROPERTIES LABELS tools TIMEOUT 300 RESOURCE_LOCK strata_api_server)
