# SPDX-License-Identifier: Apache-2.0
# ./quiesce demo builds only what the report runs: the `demo` build preset's targets (read
# from CMakePresets.json), configured as the demo preset configures them, need no test
# target, no test source and no mutant - checked on the build plan (ninja -t commands),
# without building anything.
# cmake -DSOURCE_DIR=... -DWORK_DIR=... -P check_demo_build_set.cmake
file(REMOVE_RECURSE ${WORK_DIR})
file(READ ${SOURCE_DIR}/CMakePresets.json presets)
string(JSON count LENGTH "${presets}" buildPresets)
math(EXPR last "${count} - 1")
set(targets "")
foreach(i RANGE ${last})
  string(JSON name GET "${presets}" buildPresets ${i} name)
  if(name STREQUAL "demo")
    string(JSON n LENGTH "${presets}" buildPresets ${i} targets)
    math(EXPR n_last "${n} - 1")
    foreach(t RANGE ${n_last})
      string(JSON target GET "${presets}" buildPresets ${i} targets ${t})
      list(APPEND targets ${target})
    endforeach()
  endif()
endforeach()
if(NOT targets)
  message(FATAL_ERROR "CMakePresets.json has no demo build preset with targets")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --preset demo -S ${SOURCE_DIR} -B ${WORK_DIR}
                WORKING_DIRECTORY ${SOURCE_DIR} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "configuring the demo preset failed:\n${out}\n${err}")
endif()
execute_process(COMMAND ninja -C ${WORK_DIR} -t commands ${targets} RESULT_VARIABLE rc
                OUTPUT_VARIABLE commands ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "ninja -t commands ${targets} failed:\n${err}")
endif()
# Paths as the plan names them: the build directory (which may itself lie under a tests/
# folder) becomes <build>, the source directory <src>.
string(REPLACE "${WORK_DIR}" "<build>" commands "${commands}")
string(REPLACE "${SOURCE_DIR}" "<src>" commands "${commands}")
foreach(forbidden "<src>/tests/" "<build>/tests/" " tests/" "gtest" "mutant" "bin/test_")
  string(FIND "${commands}" "${forbidden}" at)
  if(NOT at EQUAL -1)
    string(SUBSTRING "${commands}" ${at} 200 context)
    message(FATAL_ERROR "the demo build set builds '${forbidden}': ...${context}")
  endif()
endforeach()
foreach(needed "bin/quiesce " "bin/bench_wq" "bin/bench_rcu" "bin/bench_verity" "Unity/")
  string(FIND "${commands}" "${needed}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "the demo build set does not build '${needed}'")
  endif()
endforeach()
string(REGEX MATCHALL "\n" lines "${commands}")
list(LENGTH lines n_commands)
message(STATUS "demo build set: ${targets}: ${n_commands} commands, no test target: ok")
file(REMOVE_RECURSE ${WORK_DIR})
