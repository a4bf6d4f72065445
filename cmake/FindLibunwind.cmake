# Finds libunwind (the shim walks native stacks with unw_backtrace) and defines the imported target
# Libunwind::Libunwind, with Libunwind_FOUND, Libunwind_VERSION, Libunwind_INCLUDE_DIR and
# Libunwind_LIBRARY. libunwind ships a pkg-config file but no CMake package.
find_path(Libunwind_INCLUDE_DIR libunwind.h)
find_library(Libunwind_LIBRARY unwind)

# The version is in libunwind-common.h, which Debian keeps under the multiarch include directory.
find_file(Libunwind_COMMON_HEADER libunwind-common.h HINTS ${Libunwind_INCLUDE_DIR}
          PATH_SUFFIXES ${CMAKE_LIBRARY_ARCHITECTURE})
mark_as_advanced(Libunwind_INCLUDE_DIR Libunwind_LIBRARY Libunwind_COMMON_HEADER)
if(Libunwind_COMMON_HEADER)
  file(STRINGS ${Libunwind_COMMON_HEADER} _libunwind_version_lines
       REGEX "^#define[ \t]+UNW_VERSION_(MAJOR|MINOR|EXTRA)[ \t]+[0-9]+")
  foreach(_part MAJOR MINOR EXTRA)
    string(REGEX REPLACE ".*UNW_VERSION_${_part}[ \t]+([0-9]+).*" "\\1" _libunwind_${_part}
           "${_libunwind_version_lines}")
  endforeach()
  set(Libunwind_VERSION "${_libunwind_MAJOR}.${_libunwind_MINOR}.${_libunwind_EXTRA}")
  unset(_libunwind_version_lines)
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(Libunwind REQUIRED_VARS Libunwind_LIBRARY Libunwind_INCLUDE_DIR
                                  VERSION_VAR Libunwind_VERSION)

if(Libunwind_FOUND AND NOT TARGET Libunwind::Libunwind)
  add_library(Libunwind::Libunwind UNKNOWN IMPORTED)
  set_target_properties(Libunwind::Libunwind PROPERTIES IMPORTED_LOCATION "${Libunwind_LIBRARY}"
                        INTERFACE_INCLUDE_DIRECTORIES "${Libunwind_INCLUDE_DIR}")
endif()
