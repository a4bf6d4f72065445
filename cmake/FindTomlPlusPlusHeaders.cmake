# Finds toml++ for header-only use and defines the imported target TomlPlusPlus::Headers, with
# TomlPlusPlusHeaders_FOUND, TomlPlusPlusHeaders_VERSION and TomlPlusPlusHeaders_INCLUDE_DIR.
# Debian's tomlplusplus CMake package links its compiled libtomlplusplus.so instead: header-only
# use keeps the installed `trainshim` free of that runtime library.
find_path(TomlPlusPlusHeaders_INCLUDE_DIR toml++/toml.h)
mark_as_advanced(TomlPlusPlusHeaders_INCLUDE_DIR)
set(_toml_version_header ${TomlPlusPlusHeaders_INCLUDE_DIR}/toml++/impl/version.h)
if(TomlPlusPlusHeaders_INCLUDE_DIR AND EXISTS ${_toml_version_header})
  file(STRINGS ${_toml_version_header} _toml_version_lines
       REGEX "^#define[ \t]+TOML_LIB_(MAJOR|MINOR|PATCH)[ \t]+[0-9]+")
  foreach(_part MAJOR MINOR PATCH)
    string(REGEX REPLACE ".*TOML_LIB_${_part}[ \t]+([0-9]+).*" "\\1" _toml_${_part} "${_toml_version_lines}")
  endforeach()
  set(TomlPlusPlusHeaders_VERSION "${_toml_MAJOR}.${_toml_MINOR}.${_toml_PATCH}")
  unset(_toml_version_lines)
endif()
unset(_toml_version_header)

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(TomlPlusPlusHeaders REQUIRED_VARS TomlPlusPlusHeaders_INCLUDE_DIR
                                  VERSION_VAR TomlPlusPlusHeaders_VERSION)

if(TomlPlusPlusHeaders_FOUND AND NOT TARGET TomlPlusPlus::Headers)
  add_library(TomlPlusPlus::Headers INTERFACE IMPORTED)
  set_target_properties(TomlPlusPlus::Headers PROPERTIES INTERFACE_INCLUDE_DIRECTORIES
                        "${TomlPlusPlusHeaders_INCLUDE_DIR}")
endif()
