# SASS check of the Hopper prefill attention kernel (issue 19, tests/scripts/cuda_hopper_sass.sh):
# every instantiation of prefill_attention_hopper_kernel in the sm_90a object must issue HGMMA
# (wgmma), not fall back to HMMA. Needs no GPU; skipped (ctest SKIP) where cuobjdump is absent.
if(STRATA_HAVE_CUDA AND TARGET strata_cuda_sm90a)
  find_program(STRATA_CUOBJDUMP cuobjdump HINTS ${CUDAToolkit_BIN_DIR} /usr/local/cuda/bin)
  add_test(NAME cuda_hopper_sass
    COMMAND sh ${CMAKE_SOURCE_DIR}/tests/scripts/cuda_hopper_sass.sh
      "$<TARGET_OBJECTS:strata_cuda_sm90a>")
  set_tests_properties(cuda_hopper_sass PROPERTIES LABELS cuda TIMEOUT 120 SKIP_RETURN_CODE 77
    ENVIRONMENT "CUOBJDUMP=${STRATA_CUOBJDUMP}")
endif()
