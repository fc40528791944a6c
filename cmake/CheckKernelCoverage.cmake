# Fails unless every CUDA kernel ran under the CPU emulator (LOCKSTEP_CUDA=EMULATED): compares the
# __global__ functions of the ops/cuda/*.cu sources with the launch log the ctest
# `cuda_emulator` wrote (LOCKSTEP_EMULATOR_LAUNCH_LOG: one kernel name a line).
#   cmake -DSOURCES=<ops/cuda dir> -DLOG=<launch log> -P cmake/CheckKernelCoverage.cmake
cmake_policy(SET CMP0057 NEW)  # if(IN_LIST)
file(GLOB sources "${SOURCES}/*.cu")
set(kernels "")
foreach(source IN LISTS sources)
  file(READ "${source}" text)
  # __global__ void [__launch_bounds__(...)] name
  string(REGEX MATCHALL
    "__global__[ \t\r\n]+void[ \t\r\n]+(__launch_bounds__\\([^)]*\\)[ \t\r\n]+)?[A-Za-z_][A-Za-z0-9_]*"
    found "${text}")
  foreach(match IN LISTS found)
    string(REGEX REPLACE ".*[ \t\r\n]([A-Za-z_][A-Za-z0-9_]*)$" "\\1" name "${match}")
    list(APPEND kernels ${name})
  endforeach()
endforeach()
list(REMOVE_DUPLICATES kernels)
list(LENGTH kernels kernel_count)
if(kernel_count EQUAL 0)
  message(FATAL_ERROR "no __global__ kernel found in ${SOURCES}/*.cu")
endif()
if(NOT EXISTS "${LOG}")
  message(FATAL_ERROR "no launch log at ${LOG}: run the ctest cuda_emulator first")
endif()
file(STRINGS "${LOG}" launched)
set(missing "")
set(run 0)
foreach(kernel IN LISTS kernels)
  if(kernel IN_LIST launched)
    math(EXPR run "${run} + 1")
  else()
    list(APPEND missing ${kernel})
  endif()
endforeach()
message(STATUS "${run} of ${kernel_count} __global__ kernels in ${SOURCES} ran under the emulator")
if(missing)
  list(JOIN missing "\n  " listed)
  message(FATAL_ERROR "kernels never launched under the CUDA emulator:\n  ${listed}\n"
                      "add a case to tests/ops/cuda_*_test.cpp that reaches each")
endif()
