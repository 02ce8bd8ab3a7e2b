# Tokenizer parity: `strata tokenize` vs @lenml/tokenizers (a JavaScript port of HF
# tokenizers) on a generated >= 1 MB corpus, for the real Llama-3 tokenizer.json (npm) and for
# the built-in tokenizer of `strata make-model`. Fails on the first differing line, on any
# decode(encode(x)) != x, and on streaming detokenization differing from decode.
if(NOT STRATA_SANITIZE STREQUAL "")
  return()  # needs the strata binary: release builds only (sanitizer runs cover the unit tests)
endif()
find_program(STRATA_NODE node)
foreach(kind llama3 builtin)
  add_test(NAME tokenizer_parity_${kind}
    COMMAND ${CMAKE_COMMAND} -DNODE=${STRATA_NODE} -DSTRATA=$<TARGET_FILE:strata> -DSRC=${CMAKE_SOURCE_DIR}
            -DWORK=${CMAKE_BINARY_DIR}/tokenizer_parity/${kind} -DKIND=${kind}
            -P ${CMAKE_SOURCE_DIR}/tools/corpus/parity.cmake)
  set_tests_properties(tokenizer_parity_${kind} PROPERTIES LABELS runtime TIMEOUT 600)
endforeach()
