# Fails when a library file includes a header of a layer above its own.
#   cmake -DROOT=<source dir> -P cmake/CheckLayers.cmake
# Layers, lowest first: engine/core <- ops <- engine/model <- parallel. A file may include its own
# layer and the ones below; nothing in the library includes bench/, examples/, programs/ or tests/;
# and programs/ and examples/ include only public headers (<lockstep/...>), no internal one.
# The public headers (include/lockstep/) belong to the layers below by the table that follows;
# an include is checked whether it is quoted ("engine/core/...") or public (<lockstep/...>).
cmake_minimum_required(VERSION 3.25)  # IN_LIST, when run as a script
set(layers engine/core ops engine/model parallel)
set(public_engine/core allocator.h clock.h device.h dtype.h error.h json.h precision.h stream.h tensor.h)
set(public_ops)
set(public_engine/model checkpoint_retention.h data/dataset.h data/named_input.h data/prefetch.h
    data/sampler.h data/text_corpus.h data/tokenizer.h data/wordnet.h hf_transformer.h
    transformer_config.h
    nn/autograd.h nn/functional.h nn/inputs.h nn/loss.h nn/module.h nn/parameter.h nn/pooling.h)
set(public_parallel buckets.h data_parallel.h device_use.h lockstep.h pipeline.h pipeline_schedule.h planner.h
    trainer.h world.h)

# Every public header must be in the table: a new one without a layer would escape the check.
file(GLOB_RECURSE public_files RELATIVE "${ROOT}/include/lockstep" "${ROOT}/include/lockstep/*.h")
set(violations "")
foreach(header IN LISTS public_files)
  set(known FALSE)
  foreach(layer IN LISTS layers)
    if(header IN_LIST public_${layer})
      set(known TRUE)
    endif()
  endforeach()
  if(NOT known)
    string(APPEND violations "  include/lockstep/${header} is in no layer of cmake/CheckLayers.cmake\n")
  endif()
endforeach()

# The layer of an included header: "engine/core/x.h" by its folder, <lockstep/x.h> by the table;
# empty for a system or third-party header.
function(layer_of header out)
  set(found "")
  if(header MATCHES "^lockstep/(.+)$")
    set(name "${CMAKE_MATCH_1}")
    foreach(layer IN LISTS layers)
      if(name IN_LIST public_${layer})
        set(found ${layer})
      endif()
    endforeach()
    if(found STREQUAL "")
      set(found "unknown")
    endif()
  elseif(header MATCHES "^(engine/core|engine/model|ops|parallel)/")
    set(found ${CMAKE_MATCH_1})
  elseif(header MATCHES "^(engine|bench|examples|programs|tests)/")
    set(found "outside")  # engine/ has no headers of its own, only core/ and model/
  endif()
  set(${out} "${found}" PARENT_SCOPE)
endfunction()

set(level 0)
foreach(layer IN LISTS layers)
  list(SUBLIST layers 0 ${level} below)
  list(APPEND below ${layer})
  file(GLOB_RECURSE files "${ROOT}/${layer}/*.h" "${ROOT}/${layer}/*.cpp" "${ROOT}/${layer}/*.cu"
       "${ROOT}/${layer}/*.cuh")
  foreach(name IN LISTS public_${layer})
    list(APPEND files "${ROOT}/include/lockstep/${name}")
  endforeach()
  foreach(file IN LISTS files)
    file(STRINGS "${file}" includes REGEX "^[ \t]*#[ \t]*include[ \t]+[\"<]")
    foreach(line IN LISTS includes)
      string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]+[\"<]([^\">]+)[\">].*" "\\1" header "${line}")
      layer_of("${header}" included)
      if(included STREQUAL "")
        continue()
      endif()
      if(NOT included IN_LIST below)
        file(RELATIVE_PATH rel "${ROOT}" "${file}")
        string(APPEND violations "  ${rel} (layer ${layer}) includes \"${header}\"\n")
      endif()
    endforeach()
  endforeach()
  math(EXPR level "${level} + 1")
endforeach()
# Inside parallel/, folders in layers too, lowest first: the communicator interfaces, the backends
# (host, then MPI, then NCCL, which exchanges its ids over MPI), the runtime (process groups, the
# world, shards, phases, step I/O), observability (which reads the runtime), the engine (the worker
# group, which runs observability's watchdog and telemetry), the strategies, the planner. A folder
# may include its own and the ones before it: no include cycle between folders.
set(parallel_layers comm host mpi nccl runtime observability engine data_parallel pipeline planner)
file(GLOB parallel_folders LIST_DIRECTORIES true RELATIVE "${ROOT}/parallel" "${ROOT}/parallel/*")
foreach(folder IN LISTS parallel_folders)
  if(IS_DIRECTORY "${ROOT}/parallel/${folder}" AND NOT folder IN_LIST parallel_layers)
    string(APPEND violations "  parallel/${folder}/ is in no layer of cmake/CheckLayers.cmake\n")
  endif()
endforeach()
set(level 0)
foreach(folder IN LISTS parallel_layers)
  list(SUBLIST parallel_layers 0 ${level} allowed)
  list(APPEND allowed ${folder})
  file(GLOB files "${ROOT}/parallel/${folder}/*.h" "${ROOT}/parallel/${folder}/*.cpp"
       "${ROOT}/parallel/${folder}/*.cu")
  foreach(file IN LISTS files)
    file(STRINGS "${file}" includes REGEX "^[ \t]*#[ \t]*include[ \t]+\"parallel/")
    foreach(line IN LISTS includes)
      string(REGEX REPLACE ".*\"parallel/([a-z_]+)/.*" "\\1" included "${line}")
      if(NOT included IN_LIST allowed)
        file(RELATIVE_PATH rel "${ROOT}" "${file}")
        string(APPEND violations "  ${rel} (parallel/${folder}) includes parallel/${included}/, a "
                                 "layer above it\n")
      endif()
    endforeach()
  endforeach()
  math(EXPR level "${level} + 1")
endforeach()
# programs/ and examples/ embed lockstep as an outside application would: public headers only.
file(GLOB_RECURSE example_files "${ROOT}/programs/*.cpp" "${ROOT}/programs/*.h"
     "${ROOT}/examples/*.cpp" "${ROOT}/examples/*.h")
foreach(file IN LISTS example_files)
  file(STRINGS "${file}" includes REGEX "^[ \t]*#[ \t]*include[ \t]+\"(engine|ops|parallel)/")
  foreach(line IN LISTS includes)
    file(RELATIVE_PATH rel "${ROOT}" "${file}")
    string(APPEND violations "  ${rel} (a program or example) includes an internal header: ${line}\n")
  endforeach()
endforeach()
# tools/ and bench/ measure and diagnose the engine from inside, but only through this short list
# of internal headers (and the ops they benchmark): a new reach into the engine is a decision.
set(tool_allowlist engine/core/runtime.h engine/core/system_info.h engine/core/gpu_monitor.h
    engine/core/json_reader.h engine/model/checkpoint/atomic_file.h ops/host/onednn_matmul.h
    parallel/comm/communicator.h
    parallel/comm/collective.h parallel/host/host_reduce.h parallel/mpi/mpi_runtime.h
    parallel/runtime/world_communicators.h parallel/runtime/worker_thread.h
    parallel/observability/telemetry.h parallel/observability/layer_clock.h
    parallel/observability/flight_recorder.h)
file(GLOB_RECURSE tool_files "${ROOT}/tools/*.cpp" "${ROOT}/tools/*.h" "${ROOT}/bench/*.cpp"
     "${ROOT}/bench/*.h")
foreach(file IN LISTS tool_files)
  file(STRINGS "${file}" includes REGEX "^[ \t]*#[ \t]*include[ \t]+\"(engine|ops|parallel)/")
  foreach(line IN LISTS includes)
    string(REGEX REPLACE "^[^\"]*\"([^\"]+)\".*" "\\1" header "${line}")
    if(NOT header IN_LIST tool_allowlist AND NOT header MATCHES "^ops/[a-z_]+\\.h$")
      file(RELATIVE_PATH rel "${ROOT}" "${file}")
      string(APPEND violations "  ${rel} (a tool or benchmark) includes ${header}, which is not "
                               "in cmake/CheckLayers.cmake's tool_allowlist\n")
    endif()
  endforeach()
endforeach()
# The built-in models are written as an application writes one: public headers only (besides
# their own), so the public nn API is known to be enough for them.
set(models_on_public_api engine/model/nn/module.cpp engine/model/nn/transformer.h
    engine/model/nn/transformer.cpp)
foreach(name IN LISTS models_on_public_api)
  file(STRINGS "${ROOT}/${name}" includes REGEX "^[ \t]*#[ \t]*include[ \t]+\"(engine|ops|parallel)/")
  foreach(line IN LISTS includes)
    if(NOT line MATCHES "engine/model/nn/transformer.h")
      string(APPEND violations "  ${name} (a built-in model) includes an internal header: ${line}\n")
    endif()
  endforeach()
endforeach()
if(violations)
  message(FATAL_ERROR "#includes against the layer direction engine/core <- ops <- engine/model "
                      "<- parallel (and, inside parallel/, ${parallel_layers}):\n${violations}Move the code to the right layer, or pass what "
                      "it needs down as an argument (docs/architecture.md).")
endif()
