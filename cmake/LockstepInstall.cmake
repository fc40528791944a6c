# Installs the library, its headers and a CMake package, so that an outside project can do
#   find_package(lockstep CONFIG REQUIRED)  and link  lockstep::lockstep.
# The public headers are include/lockstep/, installed as they are; <lockstep/lockstep.h> includes
# them all.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS lockstep lockstep_core lockstep_ops lockstep_model lockstep_parallel EXPORT lockstepTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# The public headers, and only they: include/lockstep/ is the one list of what is public
# (<lockstep/lockstep.h> includes them all). The ctest consumer_package builds a project against
# this install, so a public header that includes an internal one fails there.
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/lockstep DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

install(EXPORT lockstepTargets NAMESPACE lockstep:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/lockstep)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/lockstepConfig.cmake.in
  ${PROJECT_BINARY_DIR}/lockstepConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/lockstep)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/lockstepConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/lockstepConfig.cmake ${PROJECT_BINARY_DIR}/lockstepConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/lockstep)
