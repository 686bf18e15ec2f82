# SPDX-License-Identifier: Apache-2.0
# Install rules: headers, the library, a CMake package (find_package(quiesce)) and a
# pkg-config file (pkg-config --cflags --libs quiesce).
include(CMakePackageConfigHelpers)

set(QUIESCE_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/quiesce)

install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/quiesce
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${PROJECT_BINARY_DIR}/generated/include/quiesce/version.hpp
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/quiesce)
set(_installed_libraries quiesce quiesce_keys quiesce_sanitize quiesce_verity)
if(TARGET quiesce_shared)
  list(APPEND _installed_libraries quiesce_shared)  # libquiesce.so.0 beside libquiesce.a
endif()
install(TARGETS ${_installed_libraries} EXPORT quiesceTargets
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

# pkg-config: one file per library, so that a workqueue/RCU user links neither libcrypto
# nor the scenarios. No -std flag: C++20 is the minimum (as the CMake target's cxx_std_20
# feature says), not a cap; the user's own -std (c++20 or later) stays in force.
# Relocatable: the prefix is found relative to the .pc file, wherever it is installed.
file(RELATIVE_PATH QUIESCE_PC_PREFIX_REL "/p/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/p")
function(quiesce_pkg_config name description requires libs)
  set(QUIESCE_PC_NAME ${name})
  set(QUIESCE_PC_DESCRIPTION "${description}")
  set(QUIESCE_PC_REQUIRES "${requires}")
  set(QUIESCE_PC_LIBS "${libs}")
  configure_file(${PROJECT_SOURCE_DIR}/cmake/quiesce.pc.in ${PROJECT_BINARY_DIR}/${name}.pc @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/${name}.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endfunction()
quiesce_pkg_config(quiesce "${PROJECT_DESCRIPTION}: workqueues, RCU, budgets, watchdog" "fmt"
                   "-lquiesce -pthread")
quiesce_pkg_config(quiesce-keys "quiesce: the in-memory key store (seed 000)" "quiesce"
                   "-lquiesce_keys")
quiesce_pkg_config(quiesce-sanitize "quiesce: the page sanitizer (seed 003)" "quiesce"
                   "-lquiesce_sanitize")
quiesce_pkg_config(quiesce-verity "quiesce: fs-verity trees, digests, verified reads (seed 004)"
                   "quiesce libcrypto" "-lquiesce_verity")
install(FILES ${PROJECT_SOURCE_DIR}/LICENSE DESTINATION ${CMAKE_INSTALL_DOCDIR})
