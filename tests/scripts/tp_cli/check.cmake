# Run by tests/scripts/tp_cli.cmake: cmake -DSTRATA=... -DWORK=... -P check.cmake
cmake_minimum_required(VERSION 3.25)
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})

function(run_ok out_var)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  set(${out_var} "${out}" PARENT_SCOPE)
endfunction()

# tiny: 4 heads, 2 KV heads -> tp 2 splits, tp 3 does not.
run_ok(ignored ${STRATA} make-model --out ${WORK}/m --dtype f32 --layers 3 --seed 5)
set(gen ${STRATA} generate --model ${WORK}/m --ids 5,17,300,2,9 --max-tokens 16 --temperature 0
    --ignore-eos --set backend.threads=2)
run_ok(t1 ${gen})
run_ok(t2 ${gen} --tp-size 2)
if(t1 STREQUAL "" OR NOT t1 STREQUAL t2)
  message(FATAL_ERROR "greedy text differs between --tp-size 1 and 2:\n[${t1}]\n[${t2}]")
endif()

# Teacher forcing: the .npy files hold the same shape; rank 0 gathered the full vocabulary.
set(tf ${STRATA} generate --model ${WORK}/m --force-ids 5,17,300,2,9,44,81)
run_ok(ignored ${tf} --dump-logits ${WORK}/a.npy)
run_ok(ignored ${tf} --dump-logits ${WORK}/b.npy --tp-size 2)
file(SIZE ${WORK}/a.npy sa)
file(SIZE ${WORK}/b.npy sb)
if(NOT sa EQUAL sb OR sa LESS 1000)
  message(FATAL_ERROR "teacher-forced logits: ${sa} vs ${sb} bytes")
endif()

execute_process(COMMAND ${gen} --tp-size 3 RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_QUIET)
if(rc EQUAL 0 OR NOT err MATCHES "does not divide the model's 2 KV heads")
  message(FATAL_ERROR "--tp-size 3: rc ${rc}, stderr: ${err}")
endif()

# Rendezvous: rank 1 with nobody listening stops after --tp-timeout, naming the master.
string(RANDOM LENGTH 4 ALPHABET 0123456789 r)
math(EXPR port "20000 + ${r}")
execute_process(COMMAND ${gen} --tp-size 2 --tp-rank 1 --tp-master 127.0.0.1:${port}
                        --tp-timeout 1
                RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_QUIET)
if(rc EQUAL 0 OR NOT err MATCHES "could not join rank 0 at 127.0.0.1:${port}")
  message(FATAL_ERROR "lonely rank 1: rc ${rc}, stderr: ${err}")
endif()

# Two processes meet (run concurrently by one execute_process); both then report that
# separate-process ranks stop after the rendezvous (plan forwarding is not built yet).
math(EXPR port2 "${port} + 1")
execute_process(
  COMMAND ${gen} --tp-size 2 --tp-rank 0 --tp-master 127.0.0.1:${port2} --tp-timeout 30
  COMMAND ${gen} --tp-size 2 --tp-rank 1 --tp-master 127.0.0.1:${port2} --tp-timeout 30
  RESULTS_VARIABLE rcs ERROR_VARIABLE err OUTPUT_QUIET)
string(REGEX MATCHALL "the rendezvous succeeded" met "${err}")
list(LENGTH met n)
if(NOT n EQUAL 2)
  message(FATAL_ERROR "two-process rendezvous: rc ${rcs}, stderr: ${err}")
endif()
