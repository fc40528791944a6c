# ctest script: install this build to a fresh prefix, configure and build examples/consumer
# against it (find_package(lockstep CONFIG REQUIRED)), then run the consumer.
set(work ${BINARY_DIR}/consumer-test)
file(REMOVE_RECURSE ${work})
function(run_step)
  execute_process(COMMAND ${ARGV} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "step failed (${rc}): ${ARGV}\n${out}\n${err}")
  endif()
  message(STATUS "${out}")
endfunction()
run_step(${CMAKE_COMMAND} --install ${BINARY_DIR} --prefix ${work}/prefix)
run_step(${CMAKE_COMMAND} -S ${SOURCE_DIR}/examples/consumer -B ${work}/build
         -DCMAKE_PREFIX_PATH=${work}/prefix -DCMAKE_BUILD_TYPE=Release)
run_step(${CMAKE_COMMAND} --build ${work}/build)
run_step(${work}/build/consumer)
