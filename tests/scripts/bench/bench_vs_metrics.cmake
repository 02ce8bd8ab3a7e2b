# cmake -DSTRATA=... -DSRC=... -DWORK=... -P bench_vs_metrics.cmake
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
execute_process(COMMAND ${STRATA} make-model --preset tiny --layers 3 --out ${WORK}/model
                RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "make-model failed")
endif()
set(prompts_per 2)
execute_process(
  COMMAND ${STRATA} bench serve --server-config ${SRC}/configs/tiny-cpu.yaml
          --serve-arg --model --serve-arg ${WORK}/model --input 24 --output 6 --concurrency 1,4
          --prompts-per-concurrency ${prompts_per} --min-prompts 2 --warmup 1 --out-dir ${WORK}/out
          --fail-on-error
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}")
if(NOT rc EQUAL 0)
  file(GLOB logs ${WORK}/out/server-*.log)
  foreach(l ${logs})
    file(READ ${l} text)
    message("--- ${l}\n${text}")
  endforeach()
  message(FATAL_ERROR "strata bench serve failed (${rc}):\n${err}")
endif()
foreach(f report.json throughput.svg ttft.svg)
  if(NOT EXISTS ${WORK}/out/${f})
    message(FATAL_ERROR "missing ${f}")
  endif()
endforeach()
file(READ ${WORK}/out/report.json report)
string(JSON n LENGTH "${report}" levels)
if(NOT n EQUAL 2)
  message(FATAL_ERROR "expected 2 levels, got ${n}")
endif()
math(EXPR last "${n} - 1")
foreach(i RANGE ${last})
  string(JSON conc GET "${report}" levels ${i} concurrency)
  string(JSON completed GET "${report}" levels ${i} completed)
  string(JSON failed GET "${report}" levels ${i} failed)
  string(JSON out_tokens GET "${report}" levels ${i} total_output_tokens)
  string(JSON in_tokens GET "${report}" levels ${i} total_input_tokens)
  string(JSON srv_req GET "${report}" levels ${i} server "vllm:request_success_total")
  string(JSON srv_gen GET "${report}" levels ${i} server "vllm:generation_tokens_total")
  string(JSON srv_prompt GET "${report}" levels ${i} server "vllm:prompt_tokens_total")
  math(EXPR want "${conc} * ${prompts_per}")
  if(want LESS 2)
    set(want 2)
  endif()
  math(EXPR want_out "${want} * 6")
  math(EXPR want_in "${want} * 24")
  # Counters are doubles in the JSON ("8.0" or "8"): compare numerically.
  foreach(pair "completed;${completed};${want}" "failed;${failed};0" "output tokens;${out_tokens};${want_out}"
          "input tokens;${in_tokens};${want_in}" "server requests;${srv_req};${want}"
          "server generation tokens;${srv_gen};${want_out}" "server prompt tokens;${srv_prompt};${want_in}")
    list(GET pair 0 what)
    list(GET pair 1 got)
    list(GET pair 2 expect)
    string(REGEX REPLACE "\\.0*$" "" got "${got}")
    if(NOT got EQUAL expect)
      message(FATAL_ERROR "concurrency ${conc}: ${what} = ${got}, expected ${expect}")
    endif()
  endforeach()
endforeach()

# Steady-state mode: a ramp-up round of c requests with staggered output lengths
# (6 * (j+1) / c: 3 and 6 at c = 2) is sent first and left out of the figures; the server's
# counters cover it, so server = measured + excluded.
execute_process(
  COMMAND ${STRATA} bench serve --server-config ${SRC}/configs/tiny-cpu.yaml
          --serve-arg --model --serve-arg ${WORK}/model --input 24 --output 6 --concurrency 2
          --prompts-per-concurrency 2 --min-prompts 2 --warmup 0 --steady-state --out-dir ${WORK}/steady
          --fail-on-error
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "strata bench serve --steady-state failed (${rc}):\n${err}")
endif()
file(READ ${WORK}/steady/report.json report)
string(JSON steady GET "${report}" levels 0 steady_state)
string(JSON completed GET "${report}" levels 0 completed)
string(JSON failed GET "${report}" levels 0 failed)
string(JSON out_tokens GET "${report}" levels 0 total_output_tokens)
string(JSON ex_req GET "${report}" levels 0 excluded_requests)
string(JSON ex_out GET "${report}" levels 0 excluded_output_tokens)
string(JSON ex_in GET "${report}" levels 0 excluded_input_tokens)
string(JSON srv_req GET "${report}" levels 0 server "vllm:request_success_total")
string(JSON srv_gen GET "${report}" levels 0 server "vllm:generation_tokens_total")
string(JSON srv_prompt GET "${report}" levels 0 server "vllm:prompt_tokens_total")
if(NOT steady STREQUAL "ON" AND NOT steady STREQUAL "true")
  message(FATAL_ERROR "steady_state not recorded in the report (${steady})")
endif()
foreach(pair "completed;${completed};4" "failed;${failed};0" "output tokens;${out_tokens};24"
        "excluded requests;${ex_req};2" "excluded output tokens;${ex_out};9"
        "excluded input tokens;${ex_in};48" "server requests;${srv_req};6"
        "server generation tokens;${srv_gen};33" "server prompt tokens;${srv_prompt};144")
  list(GET pair 0 what)
  list(GET pair 1 got)
  list(GET pair 2 expect)
  string(REGEX REPLACE "\\.0*$" "" got "${got}")
  if(NOT got EQUAL expect)
    message(FATAL_ERROR "steady state: ${what} = ${got}, expected ${expect}")
  endif()
endforeach()
message("bench vs /metrics: OK")
