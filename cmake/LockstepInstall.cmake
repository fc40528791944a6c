# Installs the library, its headers and a CMake package, so that an outside project can do
#   find_package(lockstep CONFIG REQUIRED)  and link  lockstep::lockstep.
# The public headers install under include/lockstep/ keeping the source layout; <lockstep/lockstep.h>
# includes them all.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS lockstep lockstep_core lockstep_ops lockstep_model lockstep_parallel EXPORT lockstepTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# The public headers, and only they (include/lockstep/lockstep.h lists what each is for). The
# ctest consumer_package builds a project against this install, so a public header that
# includes an internal one fails there.
set(LOCKSTEP_PUBLIC_HEADERS
  engine/core/allocator.h engine/core/device.h engine/core/dtype.h engine/core/error.h engine/core/precision.h
  engine/core/json.h engine/core/stream.h engine/core/tensor.h
  engine/model/checkpoint/hf_transformer.h engine/model/checkpoint/retention.h
  engine/model/data/dataset.h engine/model/data/prefetch.h engine/model/data/sampler.h
  engine/model/data/text_corpus.h engine/model/data/tokenizer.h engine/model/data/wordnet.h
  engine/model/nn/transformer_config.h
  parallel/buckets.h parallel/data_parallel.h parallel/pipeline.h parallel/pipeline_schedule.h
  parallel/trainer.h parallel/world.h)
foreach(header IN LISTS LOCKSTEP_PUBLIC_HEADERS)
  get_filename_component(dir ${header} DIRECTORY)
  install(FILES ${PROJECT_SOURCE_DIR}/${header} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/lockstep/${dir})
endforeach()
install(FILES ${PROJECT_SOURCE_DIR}/include/lockstep/lockstep.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/lockstep)
# The planner (public, in <lockstep/lockstep.h>; a separate line so it merges with the list above).
install(FILES ${PROJECT_SOURCE_DIR}/parallel/planner.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/lockstep/parallel)

install(EXPORT lockstepTargets NAMESPACE lockstep:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/lockstep)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/lockstepConfig.cmake.in
  ${PROJECT_BINARY_DIR}/lockstepConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/lockstep)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/lockstepConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/lockstepConfig.cmake ${PROJECT_BINARY_DIR}/lockstepConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/lockstep)
