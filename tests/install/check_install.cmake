# SPDX-License-Identifier: Apache-2.0
# cmake -DBUILD_DIR=... -DCONSUMER_DIR=... -DEXAMPLES_DIR=... -DWORK_DIR=... -P check_install.cmake
file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)

function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n${out}\n${err}")
  endif()
  message(STATUS "${what}: ok")
endfunction()

run("install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})

# 0. The installed headers are the library's contract and nothing else: every header they
# include is installed too, and the internal helpers (src/) are not among them.
file(GLOB_RECURSE installed_headers ${prefix}/include/*.hpp ${prefix}/include/*.h)
foreach(header IN LISTS installed_headers)
  file(STRINGS ${header} quoted_includes REGEX "^#include \"")
  foreach(line IN LISTS quoted_includes)
    string(REGEX REPLACE "^#include \"([^\"]+)\".*" "\\1" included "${line}")
    if(NOT EXISTS ${prefix}/include/${included})
      message(FATAL_ERROR "installed ${header} includes ${included}, which is not installed")
    endif()
  endforeach()
endforeach()
foreach(internal file_io.hpp random.hpp list.hpp)
  if(EXISTS ${prefix}/include/quiesce/${internal})
    message(FATAL_ERROR "internal header quiesce/${internal} is installed")
  endif()
endforeach()
message(STATUS "installed headers: ok")

# 0b. The CLI's man page and bash completion, generated from the CLI at build time.
if(EXISTS ${prefix}/bin/quiesce)
  file(GLOB man_page ${prefix}/share/man/man1/quiesce.1)
  if(NOT man_page)
    message(FATAL_ERROR "share/man/man1/quiesce.1 is not installed")
  endif()
  file(READ ${man_page} man_text)
  foreach(expected "\\.TH QUIESCE \"1\"" "EXIT STATUS" "verity" "completion")
    if(NOT man_text MATCHES "${expected}")
      message(FATAL_ERROR "the man page lacks ${expected}")
    endif()
  endforeach()
  set(completion ${prefix}/share/bash-completion/completions/quiesce)
  # What bash offers after each command line (the cursor on its last word).
  foreach(case "quiesce ver|verity" "quiesce verity di|digest" "quiesce verity verify --js|--json"
               "quiesce keygc --comp|--compare" "quiesce bench pe|peers" "quiesce --vers|--version"
               "quiesce completion b|bash")
    string(REPLACE "|" ";" parts "${case}")
    list(GET parts 0 line)
    list(GET parts 1 expected)
    execute_process(COMMAND bash -c "source \"$1\"; COMP_WORDS=($2); COMP_CWORD=$((\${#COMP_WORDS[@]} - 1)); _quiesce; echo \"\${COMPREPLY[*]}\""
                            bash ${completion} "${line}"
                    OUTPUT_VARIABLE offered RESULT_VARIABLE rc OUTPUT_STRIP_TRAILING_WHITESPACE)
    if(NOT rc EQUAL 0 OR NOT " ${offered} " MATCHES " ${expected} ")
      message(FATAL_ERROR "bash completion of '${line}' offers '${offered}', not ${expected}")
    endif()
  endforeach()
  message(STATUS "man page and bash completion: ok")
endif()

# 1. find_package(quiesce) + target_link_libraries(x quiesce::quiesce)
run("configure consumer" ${CMAKE_COMMAND} -S ${CONSUMER_DIR} -B ${WORK_DIR}/consumer -G Ninja
    -DCMAKE_PREFIX_PATH=${prefix})
run("build consumer" ${CMAKE_COMMAND} --build ${WORK_DIR}/consumer)
run("run consumer (find_package)" ${WORK_DIR}/consumer/consumer)
# ... and quiesce::quiesce_shared: the shared library, found by its soname.
file(GLOB sonames ${prefix}/*/libquiesce.so.0)
if(NOT sonames)
  message(FATAL_ERROR "libquiesce.so.0 is not installed")
endif()
run("run consumer (find_package, shared)" ${WORK_DIR}/consumer/consumer_shared)
execute_process(COMMAND readelf -d ${WORK_DIR}/consumer/consumer_shared OUTPUT_VARIABLE dynamic)
if(NOT dynamic MATCHES "NEEDED[^\n]*libquiesce\.so\.0")
  message(FATAL_ERROR "consumer_shared does not load libquiesce.so.0:\n${dynamic}")
endif()
execute_process(COMMAND readelf -d ${WORK_DIR}/consumer/consumer OUTPUT_VARIABLE dynamic)
if(dynamic MATCHES "libquiesce")
  message(FATAL_ERROR "consumer (quiesce::quiesce) should link the static library:\n${dynamic}")
endif()
message(STATUS "static and shared libraries: ok")

# 2. pkg-config: one .pc per library. The key store's consumer with quiesce-keys (and its
# own -std=c++20: the flags force none); a C++23 workqueue + RCU user with quiesce alone,
# whose flags must neither lower its standard nor pull in libcrypto.
file(GLOB_RECURSE pc_files ${prefix}/*/quiesce.pc)
list(GET pc_files 0 pc_file)
get_filename_component(pc_dir ${pc_file} DIRECTORY)
set(ENV{PKG_CONFIG_PATH} ${pc_dir})
function(pkg_flags out)
  execute_process(COMMAND pkg-config --cflags --libs ${ARGN} OUTPUT_VARIABLE flags
                  RESULT_VARIABLE rc OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "pkg-config --cflags --libs ${ARGN} failed")
  endif()
  if(flags MATCHES "-std=")
    message(FATAL_ERROR "pkg-config ${ARGN} forces a C++ standard: ${flags}")
  endif()
  separate_arguments(flags UNIX_COMMAND "${flags}")
  set(${out} ${flags} PARENT_SCOPE)
endfunction()
foreach(pc quiesce quiesce-keys quiesce-sanitize quiesce-verity)
  pkg_flags(unused ${pc})
endforeach()
pkg_flags(core_flags quiesce)
if(core_flags MATCHES "crypto")
  message(FATAL_ERROR "pkg-config quiesce (the runtime alone) links libcrypto: ${core_flags}")
endif()
pkg_flags(keys_flags quiesce-keys)
run("build consumer (pkg-config quiesce-keys)" c++ -std=c++20 ${CONSUMER_DIR}/main.cpp
    -o ${WORK_DIR}/consumer-pc ${keys_flags})
# -lquiesce picks libquiesce.so, as the linker does: run with the install's library dir.
get_filename_component(libdir ${pc_dir} DIRECTORY)
set(ENV{LD_LIBRARY_PATH} ${libdir})
run("run consumer (pkg-config)" ${WORK_DIR}/consumer-pc)
run("build a C++23 consumer (pkg-config quiesce)" c++ -std=c++23
    ${CONSUMER_DIR}/../cxx23/main.cpp -o ${WORK_DIR}/consumer-cxx23 ${core_flags})
run("run the C++23 consumer" ${WORK_DIR}/consumer-cxx23)

# 3. the examples (examples/), built against the install and run: each exits 0 only if
# what it demonstrates held.
run("configure examples" ${CMAKE_COMMAND} -S ${EXAMPLES_DIR} -B ${WORK_DIR}/examples -G Ninja
    -DCMAKE_PREFIX_PATH=${prefix})
run("build examples" ${CMAKE_COMMAND} --build ${WORK_DIR}/examples)
foreach(example first_look periodic_work rcu_config chunked_cleanup qsbr_reader)
  run("run example ${example}" ${WORK_DIR}/examples/${example})
endforeach()
run("run example metrics_server --check" ${WORK_DIR}/examples/metrics_server --check)
