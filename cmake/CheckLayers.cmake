# Fails when a library file includes a header of a layer above its own.
#   cmake -DROOT=<source dir> -P cmake/CheckLayers.cmake
# Layers, lowest first: engine/core <- ops <- engine/model <- parallel. A file may include its own
# layer and the ones below; nothing in the library includes bench/, examples/, programs/ or tests/;
# and programs/ and examples/ include no library header but <lockstep/lockstep.h>.
# Only quoted project includes ("engine/...", "ops/...", "parallel/...") are checked.
set(layers engine/core ops engine/model parallel)
set(violations "")
set(level 0)
foreach(layer IN LISTS layers)
  list(SUBLIST layers 0 ${level} below)
  list(APPEND below ${layer})
  file(GLOB_RECURSE files "${ROOT}/${layer}/*.h" "${ROOT}/${layer}/*.cpp" "${ROOT}/${layer}/*.cu"
       "${ROOT}/${layer}/*.cuh")
  foreach(file IN LISTS files)
    file(STRINGS "${file}" includes REGEX "^[ \t]*#[ \t]*include[ \t]+\"")
    foreach(line IN LISTS includes)
      string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]+\"([^\"]+)\".*" "\\1" header "${line}")
      if(NOT header MATCHES "^(engine|ops|parallel|bench|examples|programs|tests)/")
        continue()  # a system or third-party header
      endif()
      set(allowed FALSE)
      foreach(ok IN LISTS below)
        if(header MATCHES "^${ok}/")
          set(allowed TRUE)
        endif()
      endforeach()
      if(header MATCHES "^engine/(core|model)/" OR NOT header MATCHES "^engine/")
      else()
        set(allowed FALSE)  # engine/ has no headers of its own, only core/ and model/
      endif()
      if(NOT allowed)
        file(RELATIVE_PATH rel "${ROOT}" "${file}")
        string(APPEND violations "  ${rel} (layer ${layer}) includes \"${header}\"\n")
      endif()
    endforeach()
  endforeach()
  math(EXPR level "${level} + 1")
endforeach()
# programs/ and examples/ embed lockstep as an outside application would: the public header only.
file(GLOB_RECURSE example_files "${ROOT}/programs/*.cpp" "${ROOT}/programs/*.h"
     "${ROOT}/examples/*.cpp" "${ROOT}/examples/*.h")
foreach(file IN LISTS example_files)
  file(STRINGS "${file}" includes REGEX "^[ \t]*#[ \t]*include[ \t]+\"(engine|ops|parallel)/")
  foreach(line IN LISTS includes)
    file(RELATIVE_PATH rel "${ROOT}" "${file}")
    string(APPEND violations "  ${rel} (a program or example) includes an internal header: ${line}\n")
  endforeach()
endforeach()
if(violations)
  message(FATAL_ERROR "#includes against the layer direction engine/core <- ops <- engine/model "
                      "<- parallel:\n${violations}Move the code to the right layer, or pass what "
                      "it needs down as an argument (docs/architecture.md).")
endif()
