# libFuzzer target over the API's request parsing (tests/api/fuzz_request.cpp), run for 60 s
# in the release suite (label `fuzz`). Built with clang++ (the CMake compiler when it is
# clang, else clang++ from PATH) only when it accepts -fsanitize=fuzzer; otherwise skipped
# with a message. Boost.JSON is compiled header-only into the target.
if(NOT STRATA_SANITIZE STREQUAL "")
  return()
endif()
if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  set(strata_fuzz_cxx ${CMAKE_CXX_COMPILER})
else()
  find_program(strata_fuzz_cxx NAMES clang++ clang++-14 clang++-15 clang++-16)
endif()
if(NOT strata_fuzz_cxx)
  message(STATUS "strata: no clang++ with libFuzzer: api_fuzz_request not built")
  return()
endif()
set(probe ${CMAKE_BINARY_DIR}/fuzz_probe.cpp)
file(WRITE ${probe} "#include <cstdint>\n#include <cstddef>\nextern \"C\" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }\n")
execute_process(COMMAND ${strata_fuzz_cxx} -fsanitize=fuzzer ${probe} -o ${CMAKE_BINARY_DIR}/fuzz_probe
                RESULT_VARIABLE probe_rc OUTPUT_QUIET ERROR_QUIET)
if(NOT probe_rc EQUAL 0)
  message(STATUS "strata: ${strata_fuzz_cxx} lacks -fsanitize=fuzzer: api_fuzz_request not built")
  return()
endif()

set(fuzz_srcs
  ${CMAKE_SOURCE_DIR}/tests/api/fuzz_request.cpp
  ${CMAKE_SOURCE_DIR}/api/openai_request.cpp
  ${CMAKE_SOURCE_DIR}/api/openai_response.cpp
  ${CMAKE_SOURCE_DIR}/api/api_error.cpp
  ${CMAKE_SOURCE_DIR}/api/sparsity_limits.cpp
  ${CMAKE_SOURCE_DIR}/runtime/sparsity_profile.cpp
  ${CMAKE_SOURCE_DIR}/runtime/yaml_util.cpp
  ${CMAKE_SOURCE_DIR}/runtime/text/unicode.cpp
  ${CMAKE_SOURCE_DIR}/runtime/text/unicode_tables.cpp)
# The request's chat_template is parsed while parsing the request.
file(GLOB jinja_srcs CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/runtime/text/jinja/*.cpp)
list(APPEND fuzz_srcs ${jinja_srcs})
set(fuzz_bin ${CMAKE_BINARY_DIR}/bin/api_fuzz_request)
file(WRITE ${CMAKE_BINARY_DIR}/fuzz_boost_json.cpp "#include <boost/json/src.hpp>\n")
add_custom_command(
  OUTPUT ${fuzz_bin}
  COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_BINARY_DIR}/bin
  COMMAND ${strata_fuzz_cxx} -std=c++20 -O1 -g -fno-omit-frame-pointer
          -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
          -DBOOST_ASIO_NO_DEPRECATED -I${CMAKE_SOURCE_DIR}
          ${fuzz_srcs} ${CMAKE_BINARY_DIR}/fuzz_boost_json.cpp
          /usr/lib/x86_64-linux-gnu/libyaml-cpp.a -o ${fuzz_bin}
  DEPENDS ${fuzz_srcs}
  COMMENT "libFuzzer target api_fuzz_request (${strata_fuzz_cxx})"
  VERBATIM)
add_custom_target(api_fuzz_request ALL DEPENDS ${fuzz_bin})

set(fuzz_work ${CMAKE_BINARY_DIR}/fuzz/api_request)
add_test(NAME api_fuzz_request_60s
  COMMAND ${CMAKE_COMMAND} -E env ASAN_OPTIONS=detect_leaks=1
          ${CMAKE_SOURCE_DIR}/tests/scripts/api_fuzz_run.sh ${fuzz_bin} ${fuzz_work}
          ${CMAKE_SOURCE_DIR}/tests/api/fuzz_corpus 60)
set_tests_properties(api_fuzz_request_60s PROPERTIES LABELS fuzz TIMEOUT 180)
