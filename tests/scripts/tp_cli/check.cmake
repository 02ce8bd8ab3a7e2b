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

# Two processes (run concurrently by one execute_process; rank 0 last, so its stdout is the
# output): the greedy text equals --tp-size 1's, the follower exits 0 after rank 0's stop.
math(EXPR port2 "${port} + 2")
set(master --tp-size 2 --tp-master 127.0.0.1:${port2} --tp-timeout 30)
execute_process(
  COMMAND ${gen} ${master} --tp-rank 1
  COMMAND ${gen} ${master} --tp-rank 0
  RESULTS_VARIABLE rcs OUTPUT_VARIABLE t3 ERROR_VARIABLE err TIMEOUT 90)
if(NOT rcs STREQUAL "0;0" OR NOT t3 STREQUAL t1 OR NOT err MATCHES "rank 0 stopped the group")
  message(FATAL_ERROR "two-process greedy: rc ${rcs}\n[${t1}]\n[${t3}]\nstderr: ${err}")
endif()

# Teacher forcing over two processes: the logits equal the in-process --tp-size 2 run's bit for
# bit (the TCP all-reduce adds in the same rank order) and --tp-size 1's within 2e-5 of each
# row's largest logit (the bound of runtime_tp_cpu_test).
math(EXPR port3 "${port} + 4")
set(master --tp-size 2 --tp-master 127.0.0.1:${port3} --tp-timeout 30)
execute_process(
  COMMAND ${tf} ${master} --tp-rank 1 --dump-logits ${WORK}/unused.npy
  COMMAND ${tf} ${master} --tp-rank 0 --dump-logits ${WORK}/c.npy
  RESULTS_VARIABLE rcs ERROR_VARIABLE err OUTPUT_QUIET TIMEOUT 90)
if(NOT rcs STREQUAL "0;0" OR NOT EXISTS ${WORK}/c.npy)
  message(FATAL_ERROR "two-process teacher forcing: rc ${rcs}, stderr: ${err}")
endif()
file(SHA256 ${WORK}/b.npy hb)
file(SHA256 ${WORK}/c.npy hc)
if(NOT hb STREQUAL hc)
  message(FATAL_ERROR "two-process logits differ from the in-process --tp-size 2 logits")
endif()
find_program(PYTHON3 python3)
if(PYTHON3)
  execute_process(COMMAND ${PYTHON3} -c [=[
import struct, sys
def load(p):
    b = open(p, 'rb').read()
    n = struct.unpack('<H', b[8:10])[0]
    h = b[10:10 + n].decode()
    rows, cols = [int(x) for x in h.split('(')[1].split(')')[0].split(',')[:2]]
    v = struct.unpack('<%df' % (rows * cols), b[10 + n:])
    return [v[r * cols:(r + 1) * cols] for r in range(rows)]
a, c = load(sys.argv[1]), load(sys.argv[2])
assert len(a) == len(c) and len(a) == 7
worst = max(max(abs(x - y) for x, y in zip(ra, rc)) / max(abs(x) for x in ra) for ra, rc in zip(a, c))
print('%.3g' % worst)
sys.exit(0 if worst <= 2e-5 else 1)
]=] ${WORK}/a.npy ${WORK}/c.npy RESULT_VARIABLE rc OUTPUT_VARIABLE worst ERROR_VARIABLE perr)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "two-process logits vs --tp-size 1: worst row error ${worst} ${perr}")
  endif()
  message(STATUS "two-process teacher-forced logits vs tp 1: worst row max|d|/max|logit| ${worst}")
endif()

# A follower whose rank 0 is killed (SIGKILL while serving, idle) says so and exits.
math(EXPR port4 "${port} + 6")
set(serve ${STRATA} serve --model ${WORK}/m --port 0 --set backend.threads=1 --tp-size 2
    --tp-master 127.0.0.1:${port4} --tp-timeout 30)
string(TIMESTAMP t0 "%s")
execute_process(
  COMMAND timeout -s KILL 4 ${serve} --tp-rank 0
  COMMAND ${serve} --tp-rank 1
  RESULTS_VARIABLE rcs ERROR_VARIABLE err OUTPUT_QUIET TIMEOUT 60)
string(TIMESTAMP t1s "%s")
math(EXPR took "${t1s} - ${t0}")
list(GET rcs 1 rc1)
if(NOT err MATCHES "rank 1 of 2 ready" OR NOT err MATCHES "rank 0 closed the connection"
   OR NOT rc1 EQUAL 0 OR took GREATER 20)
  message(FATAL_ERROR "killed rank 0: rc ${rcs} after ${took} s, stderr: ${err}")
endif()

# `strata serve` as two processes answers a greedy completion like --tp-size 1 (needs curl).
find_program(CURL curl)
if(CURL)
  math(EXPR port5 "${port} + 8")
  execute_process(COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/serve_two.sh ${STRATA} ${WORK}/m ${port5}
                          ${WORK}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 90)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "two-process serve: rc ${rc}\n${out}\n${err}")
  endif()
  message(STATUS "${out}")
endif()
