# Finds what lockstep builds on. Host: oneTBB, OpenBLAS (CBLAS), zlib, threads.
# CUDA backend: the CUDA toolkit (cudart, cuBLAS) and NCCL. LOCKSTEP_CUDA=AUTO builds the backend
# whenever both are found, so that every CUDA compile error shows up wherever a toolkit exists.
# LOCKSTEP_CUDA=EMULATED needs no toolkit: the CUDA sources are compiled as C++ against the CPU
# emulator of engine/core/cuda_emulator/ (LOCKSTEP_HAVE_CUDA and LOCKSTEP_CUDA_EMULATED set, no
# NCCL), so every kernel runs on the CPU (docs/gpu.md, "CUDA emulator").
find_package(Threads REQUIRED)
find_package(TBB REQUIRED)
find_package(ZLIB REQUIRED)

# OpenBLAS through pkg-config: its cblas.h declares openblas_set_num_threads, which lockstep uses
# to keep BLAS single-threaded (host devices split GEMMs themselves and must not oversubscribe).
find_package(PkgConfig REQUIRED)
pkg_check_modules(OPENBLAS REQUIRED IMPORTED_TARGET openblas)
add_library(lockstep_openblas INTERFACE)
target_link_libraries(lockstep_openblas INTERFACE PkgConfig::OPENBLAS)

# oneDNN (libdnnl-dev) for bf16 GEMMs on the CPU's bf16 units (ops/host/onednn_matmul.h).
# Debian builds it with OpenMP: lockstep calls omp_set_num_threads itself, hence libgomp.
# Found by path rather than its CMake package, which requires OpenCL headers for its GPU side.
set(LOCKSTEP_HAVE_ONEDNN OFF)
if(NOT LOCKSTEP_ONEDNN MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "LOCKSTEP_ONEDNN must be AUTO, ON or OFF; got '${LOCKSTEP_ONEDNN}'")
elseif(NOT LOCKSTEP_ONEDNN STREQUAL "OFF")
  find_path(ONEDNN_INCLUDE_DIR oneapi/dnnl/dnnl.hpp)
  find_library(ONEDNN_LIBRARY dnnl)
  find_package(OpenMP COMPONENTS CXX QUIET)
  if(ONEDNN_INCLUDE_DIR AND ONEDNN_LIBRARY AND OpenMP_CXX_FOUND)
    add_library(lockstep_onednn INTERFACE)
    target_include_directories(lockstep_onednn INTERFACE ${ONEDNN_INCLUDE_DIR})
    target_link_libraries(lockstep_onednn INTERFACE ${ONEDNN_LIBRARY} ${OpenMP_CXX_LIBRARIES})
    target_compile_definitions(lockstep_onednn INTERFACE LOCKSTEP_HAVE_ONEDNN=1)
    set(LOCKSTEP_HAVE_ONEDNN ON)
    message(STATUS "lockstep: oneDNN ON (${ONEDNN_LIBRARY}): bf16 GEMMs on the CPU's bf16 units")
  elseif(LOCKSTEP_ONEDNN STREQUAL "ON")
    message(FATAL_ERROR "LOCKSTEP_ONEDNN=ON but oneDNN (libdnnl-dev) or OpenMP was not found. "
                        "Run scripts/setup or configure with -DLOCKSTEP_ONEDNN=OFF.")
  else()
    message(STATUS "lockstep: oneDNN OFF (libdnnl-dev not found): host bf16 is emulated in f32")
  endif()
else()
  message(STATUS "lockstep: oneDNN OFF (LOCKSTEP_ONEDNN=OFF): host bf16 is emulated in f32")
endif()

set(LOCKSTEP_HAVE_CUDA OFF)
set(LOCKSTEP_CUDA_EMULATED OFF)
if(LOCKSTEP_CUDA STREQUAL "EMULATED")
  set(LOCKSTEP_HAVE_CUDA ON)
  set(LOCKSTEP_CUDA_EMULATED ON)
  message(STATUS "lockstep: CUDA backend EMULATED (kernels run on the CPU; no toolkit, no NCCL)")
elseif(NOT LOCKSTEP_CUDA MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "LOCKSTEP_CUDA must be AUTO, ON, OFF or EMULATED; got '${LOCKSTEP_CUDA}'")
elseif(NOT LOCKSTEP_CUDA STREQUAL "OFF")
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 90)
  endif()
  if(NOT DEFINED CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  find_package(CUDAToolkit QUIET)
  find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} $ENV{NCCL_HOME}/include)
  find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} $ENV{NCCL_HOME}/lib)
  if(CMAKE_CUDA_COMPILER AND CUDAToolkit_FOUND AND NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
    enable_language(CUDA)
    if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)  # CMake < 3.26 lacks nvcc's C++20 flag
      set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
      set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    endif()
    set(CMAKE_CUDA_STANDARD 20)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    add_library(lockstep_nccl INTERFACE)
    target_include_directories(lockstep_nccl INTERFACE ${NCCL_INCLUDE_DIR})
    target_link_libraries(lockstep_nccl INTERFACE ${NCCL_LIBRARY})
    set(LOCKSTEP_HAVE_CUDA ON)
    message(STATUS "lockstep: CUDA backend ON (toolkit ${CUDAToolkit_VERSION}, NCCL ${NCCL_LIBRARY}, arch ${CMAKE_CUDA_ARCHITECTURES})")
  elseif(LOCKSTEP_CUDA STREQUAL "ON")
    message(FATAL_ERROR "LOCKSTEP_CUDA=ON but the CUDA toolkit (nvcc, cudart, cuBLAS) or NCCL was not found. "
                        "Install them or configure with -DLOCKSTEP_CUDA=OFF.")
  else()
    message(STATUS "lockstep: CUDA backend OFF (toolkit or NCCL not found)")
  endif()
else()
  message(STATUS "lockstep: CUDA backend OFF (LOCKSTEP_CUDA=OFF)")
endif()
