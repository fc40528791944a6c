# ctest helper: runs CMD (a list), checks its exit code is EXPECTED_EXIT and that its output
# contains EXPECTED_TEXT.
execute_process(COMMAND ${CMD} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc STREQUAL "${EXPECTED_EXIT}")
  message(FATAL_ERROR "expected exit ${EXPECTED_EXIT}, got ${rc}\nstdout: ${out}\nstderr: ${err}")
endif()
string(FIND "${out}${err}" "${EXPECTED_TEXT}" at)
if(at EQUAL -1)
  message(FATAL_ERROR "output lacks '${EXPECTED_TEXT}'\nstdout: ${out}\nstderr: ${err}")
endif()
