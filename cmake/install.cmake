# SPDX-License-Identifier: Apache-2.0
# Install rules: headers, the library, a CMake package (find_package(quiesce)) and a
# pkg-config file (pkg-config --cflags --libs quiesce).
include(CMakePackageConfigHelpers)

set(QUIESCE_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/quiesce)

install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/quiesce
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${PROJECT_BINARY_DIR}/generated/include/quiesce/version.hpp
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/quiesce)
install(TARGETS quiesce quiesce_keys quiesce_sanitize quiesce_verity EXPORT quiesceTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
if(TARGET quiesce_cli)
  install(TARGETS quiesce_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  # mount.fuse3's helper for `mount -t fuse.quiesce-verity` and fstab.
  install(PROGRAMS ${PROJECT_SOURCE_DIR}/tools/quiesce/quiesce-verity
          DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
install(EXPORT quiesceTargets NAMESPACE quiesce:: DESTINATION ${QUIESCE_CMAKE_DIR})

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/quiesceConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/quiesceConfig.cmake
                              INSTALL_DESTINATION ${QUIESCE_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/quiesceConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/quiesceConfig.cmake
              ${PROJECT_BINARY_DIR}/quiesceConfigVersion.cmake
        DESTINATION ${QUIESCE_CMAKE_DIR})

# Relocatable: the prefix is found relative to the .pc file, wherever it is installed.
file(RELATIVE_PATH QUIESCE_PC_PREFIX_REL "/p/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/p")
configure_file(${PROJECT_SOURCE_DIR}/cmake/quiesce.pc.in ${PROJECT_BINARY_DIR}/quiesce.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/quiesce.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
install(FILES ${PROJECT_SOURCE_DIR}/LICENSE DESTINATION ${CMAKE_INSTALL_DOCDIR})
