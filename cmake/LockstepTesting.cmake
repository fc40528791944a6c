# lockstep_expect_exit(NAME TARGET EXPECTED_EXIT EXPECTED_TEXT ARGS...): a ctest that runs program
# TARGET with ARGS and checks its exit code and that its output contains EXPECTED_TEXT
# (cmake/ExpectExit.cmake). Used for the command-line programs' usage and runtime errors.
function(lockstep_expect_exit name target expected_exit expected_text)
  add_test(NAME ${name}
    COMMAND ${CMAKE_COMMAND} "-DCMD=$<TARGET_FILE:${target}>;${ARGN}"
            -DEXPECTED_EXIT=${expected_exit} "-DEXPECTED_TEXT=${expected_text}"
            -P ${PROJECT_SOURCE_DIR}/cmake/ExpectExit.cmake)
endfunction()
