# Installs the library, its headers and a CMake package, so that an outside project can do
#   find_package(lockstep CONFIG REQUIRED)  and link  lockstep::lockstep.
# Headers install under include/lockstep/ keeping the source layout (engine/, ops/, parallel/);
# <lockstep/lockstep.h> includes the public ones.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS lockstep lockstep_core lockstep_ops lockstep_model lockstep_parallel EXPORT lockstepTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
foreach(dir engine ops parallel)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${dir}/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/lockstep/${dir}
          FILES_MATCHING PATTERN "*.h")
endforeach()
install(FILES ${PROJECT_SOURCE_DIR}/include/lockstep/lockstep.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/lockstep)

install(EXPORT lockstepTargets NAMESPACE lockstep:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/lockstep)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/lockstepConfig.cmake.in
  ${PROJECT_BINARY_DIR}/lockstepConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/lockstep)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/lockstepConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/lockstepConfig.cmake ${PROJECT_BINARY_DIR}/lockstepConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/lockstep)
