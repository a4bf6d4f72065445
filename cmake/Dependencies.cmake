# Every dependency, found once as an imported target. Each is a Debian package (scripts/install-deps
# installs them all) except the CUDA toolkit's headers; the summary at the end names what is missing
# and its package, then stops the configure step.
include(FeatureSummary)
include(CheckSymbolExists)
list(APPEND CMAKE_MODULE_PATH ${CMAKE_CURRENT_LIST_DIR})

# find_package(<package> <args>) for a required dependency, described for the summary by where it
# comes from and what it is for.
macro(trainshim_require package source purpose)
  find_package(${package} ${ARGN})
  set_package_properties(${package} PROPERTIES TYPE REQUIRED DESCRIPTION "${source}" PURPOSE "${purpose}")
endmacro()

trainshim_require(CUDAToolkit "the CUDA toolkit (-DCUDAToolkit_ROOT=... where it is not on PATH)"
                  "cuda_runtime_api.h and nccl.h declare the hooked functions (no CUDA library is linked)")
trainshim_require(Threads "Debian package libc6-dev" "the collector's threads, the shim's helper thread")
trainshim_require(Boost "Debian package libboost-dev" "Boost.Interprocess: the shim creates its shared memory")
trainshim_require(Libunwind "Debian package libunwind-dev" "the shim's native stacks (unw_backtrace)")
trainshim_require(LibDW "Debian packages libdw-dev and pkgconf"
                  "the collector symbolizes native stacks with libdw, the CLI reads symbol tables with libelf")
trainshim_require(SQLite3 "Debian package libsqlite3-dev" "the run database: the collector writes it, the CLI reads it")
trainshim_require(fmt "Debian package libfmt-dev" "text formatting in the collector and the CLI")
trainshim_require(CLI11 "Debian package libcli11-dev" "the command lines of trainshim and trainshim-collector" CONFIG)
trainshim_require(nlohmann_json "Debian package nlohmann-json3-dev" "the CLI's JSON output and baselines" CONFIG)
trainshim_require(CppHttplib "Debian packages libcpp-httplib-dev and pkgconf"
                  "trainshim metrics serves the metrics over HTTP for Prometheus")
trainshim_require(TomlPlusPlusHeaders "Debian package libtomlplusplus-dev" "the policy files of trainshim audit")
if(TRAINSHIM_BUILD_TESTS)
  trainshim_require(GTest "Debian packages libgtest-dev and libgmock-dev" "the tests (TRAINSHIM_BUILD_TESTS)")
  find_package(Python3 COMPONENTS Interpreter)
  set_package_properties(Python3 PROPERTIES TYPE OPTIONAL DESCRIPTION "Debian package python3"
                         PURPOSE "the scenario tests (tests/scenarios), not registered without it")
endif()
if(TRAINSHIM_BUILD_BENCHMARKS)
  trainshim_require(benchmark "Debian package libbenchmark-dev" "tests/bench (TRAINSHIM_BUILD_BENCHMARKS)")
endif()

feature_summary(WHAT ALL FATAL_ON_MISSING_REQUIRED_PACKAGES
                DESCRIPTION "trainshim's dependencies (a missing one: run sudo scripts/install-deps)")

# The header each package must bring beyond what its finder checks.
if(NOT EXISTS "${CUDAToolkit_INCLUDE_DIRS}/cuda_runtime_api.h")
  message(FATAL_ERROR "cuda_runtime_api.h not found in ${CUDAToolkit_INCLUDE_DIRS}: install the CUDA toolkit "
                      "and pass -DCUDAToolkit_ROOT=/usr/local/cuda if it is elsewhere.")
endif()
find_path(TRAINSHIM_NCCL_INCLUDE nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/include)
if(NOT TRAINSHIM_NCCL_INCLUDE)
  message(FATAL_ERROR "nccl.h not found: install libnccl-dev or the NCCL headers of the CUDA toolkit.")
endif()
if(NOT TARGET Boost::headers)
  message(FATAL_ERROR "Boost was found without its Boost::headers target: install the Debian package libboost-dev.")
endif()

# POSIX shared memory (shm_open): in the C library since glibc 2.34, in librt before.
check_symbol_exists(shm_open sys/mman.h TRAINSHIM_SHM_OPEN_IN_LIBC)
add_library(Librt::Librt INTERFACE IMPORTED)
if(NOT TRAINSHIM_SHM_OPEN_IN_LIBC)
  find_library(TRAINSHIM_LIBRT rt REQUIRED)
  set_target_properties(Librt::Librt PROPERTIES INTERFACE_LINK_LIBRARIES ${TRAINSHIM_LIBRT})
endif()
