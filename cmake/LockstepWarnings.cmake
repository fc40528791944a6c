# Warnings for lockstep's own C++ sources (not for nvcc-compiled .cu files).
function(lockstep_set_warnings target)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wno-unused-parameter>)
endfunction()
