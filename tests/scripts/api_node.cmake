# Script tests of `strata serve` (label api_e2e): the `openai` npm client, a battery of bad
# requests, a chaos/soak run, `promtool check metrics` and the admin console in headless
# Chromium. They need node + tools/npm/node_modules (tools/deps.sh test); promtool and
# chromium tests are added only when those programs exist. Each script starts its own server
# on a free port.
# Release builds only: the sanitizer presets run the C++ server test (tests/api/server_test.cpp).
if(NOT STRATA_SANITIZE STREQUAL "")
  return()
endif()
find_program(STRATA_NODE node)
if(NOT STRATA_NODE OR NOT EXISTS ${CMAKE_SOURCE_DIR}/tools/npm/node_modules/openai)
  message(STATUS "strata: node or tools/npm/node_modules missing: API script tests skipped")
  return()
endif()
set(api_model ${CMAKE_BINARY_DIR}/models/api-tiny)
add_test(NAME api_e2e_make_model COMMAND $<TARGET_FILE:strata> make-model --preset tiny --out ${api_model})
set_tests_properties(api_e2e_make_model PROPERTIES FIXTURES_SETUP api_e2e_model LABELS api_e2e)
set(api_env "STRATA_SOURCE_DIR=${CMAKE_SOURCE_DIR}")

function(strata_api_script name)
  add_test(NAME ${name}
    COMMAND ${STRATA_NODE} --experimental-websocket ${CMAKE_SOURCE_DIR}/tests/scripts/${name}.mjs
            $<TARGET_FILE:strata> ${api_model} ${ARGN})
  set_tests_properties(${name} PROPERTIES FIXTURES_REQUIRED api_e2e_model LABELS api_e2e TIMEOUT 180
                       ENVIRONMENT "${api_env}" RESOURCE_LOCK strata_api_server)
endfunction()

strata_api_script(api_openai_client)
strata_api_script(api_bad_requests)
# ~16 random clients for 20 s (valid, invalid, abandoned, WebSocket, admin changes), then no
# leak, consistent counters, same greedy output; the seed is printed (STRATA_CHAOS_SEED replays).
strata_api_script(api_chaos)
set_tests_properties(api_chaos PROPERTIES TIMEOUT 90)
find_program(STRATA_PROMTOOL promtool)
if(STRATA_PROMTOOL)
  strata_api_script(api_metrics_promtool ${STRATA_PROMTOOL})
else()
  message(STATUS "strata: promtool not found: api_metrics_promtool skipped")
endif()
find_program(STRATA_CHROMIUM NAMES chromium chromium-browser)
if(STRATA_CHROMIUM)
  # Screenshots of the console (desktop, 390 px) land in the test's output folder.
  strata_api_script(api_admin_browser ${STRATA_CHROMIUM}
                    ${CMAKE_BINARY_DIR}/test-output/api_admin_browser)
else()
  message(STATUS "strata: chromium not found: api_admin_browser skipped")
endif()
