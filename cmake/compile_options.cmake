# SPDX-License-Identifier: Apache-2.0
# Warnings and sanitizers for every target of the project, through one interface target.
add_library(quiesce_compile_options INTERFACE)
target_compile_options(quiesce_compile_options INTERFACE -Wall -Wextra -Werror)

if(QUIESCE_SANITIZE)
  set(_san -fsanitize=${QUIESCE_SANITIZE} -fno-omit-frame-pointer)
  if(QUIESCE_SANITIZE MATCHES "undefined")
    list(APPEND _san -fno-sanitize-recover=all)
  endif()
  target_compile_options(quiesce_compile_options INTERFACE ${_san})
  target_link_options(quiesce_compile_options INTERFACE ${_san})
  # Position-dependent executables: a sanitized PIE spends a third of its start-up applying
  # relocations (the instrumented globals' descriptors; 10.7 k page faults against 6.9 k),
  # and the tests start the CLI hundreds of times - `quiesce --version` under ASan 0.19 ->
  # 0.135 s here. These builds are never installed; release keeps the toolchain's PIE.
  # x86-64 only (ThreadSanitizer needs PIE on some other architectures).
  if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64)$")
    target_link_options(quiesce_compile_options INTERFACE
                        $<$<STREQUAL:$<TARGET_PROPERTY:TYPE>,EXECUTABLE>:-no-pie>)
  endif()
  if(QUIESCE_SANITIZE MATCHES "thread")
    # GCC 12 warns that TSan does not model std::atomic_thread_fence. Our fences order
    # accesses that are themselves atomics (seqlocks), so TSan sees no race without them.
    target_compile_options(quiesce_compile_options INTERFACE -Wno-tsan)
  endif()
endif()

if(QUIESCE_FUZZ)
  # Coverage for libFuzzer in every target; the fuzzers themselves link -fsanitize=fuzzer.
  target_compile_options(quiesce_compile_options INTERFACE -fsanitize=fuzzer-no-link)
  target_link_options(quiesce_compile_options INTERFACE -fsanitize=fuzzer-no-link)
endif()

# clang checks the runtime's protection legends (QUIESCE_GUARDED_BY, src/base/thread_annotations.hpp).
if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  target_compile_options(quiesce_compile_options INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-Wthread-safety>)
endif()

# Glue - the experiment drivers and the test bodies - compiled without optimisation in the
# sanitizer presets: their compile time nearly halves (a heavy file under ASan: 22 -> 13 s)
# while the runtime they call keeps the preset's -O1; the sanitizers check -O0 code too.
# Not the CLI: the CLI tests start it hundreds of times, and at -O0 its start-up (CLI11
# building every subcommand) made Cli.HostileNumbers 33 -> 55 s under ASan.
add_library(quiesce_glue_options INTERFACE)
if(QUIESCE_SANITIZE)
  target_compile_options(quiesce_glue_options INTERFACE -O0)
endif()
# The test bodies are glue in every preset: in release too they are compiled without
# optimisation (the library, the CLI, the experiments and the benchmarks they run keep
# -O2). The largest part of the release build: its test objects took 362 s of CPU at -O2,
# half that at -O0 (test_cli's unit 27 -> 13 s, test_base's 17 -> 8 s). The runtime's
# own suites (workqueue, RCU: the mutants' suites) and the long stress runs keep the
# preset's flags (quiesce_test ... OPTIMIZED): their races and loops are the test.
add_library(quiesce_test_body_options INTERFACE)
target_compile_options(quiesce_test_body_options INTERFACE -O0)
target_link_libraries(quiesce_test_body_options INTERFACE quiesce_glue_options)

# Checked locks (src/base/mutex.hpp): the mutex records its owner and assert_held() aborts
# when the caller does not hold it - in the sanitizer and debug builds; release keeps it free.
if(QUIESCE_SANITIZE OR CMAKE_BUILD_TYPE STREQUAL "Debug")
  target_compile_definitions(quiesce_compile_options INTERFACE QUIESCE_CHECKED_LOCKS)
endif()

# Unity builds (every preset but clang and fuzz: CMAKE_UNITY_BUILD): several sources of a
# target compiled as one, so the heavy headers (CLI11, fmt, nlohmann-json, GoogleTest) are
# parsed once per batch instead of once per file - the asan-ubsan build of the CLI took 319 s
# of CPU per file, 72 s as one unit; the release build (mutants included) 685 -> 395 s. The
# clang preset keeps one object per library source, so a missing include or a name two
# sources both define still fails there (./quiesce test builds it first); in a test or CLI
# source, a missing include that a batch-mate supplies is no longer caught by any preset
# (the price of the release build's five minutes). A file's internal names must not collide
# with another's of the same target. A type of an anonymous namespace in a member of a
# named class is a warning only once it sits in an included file, which every source is in
# a unity build.
if(CMAKE_UNITY_BUILD AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  target_compile_options(quiesce_compile_options INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-Wno-subobject-linkage>)
endif()
