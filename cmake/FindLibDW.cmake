# Finds elfutils' libdw and libelf through pkg-config (the collector symbolizes with libdw; the CLI
# reads symbol tables with libelf) and defines the imported targets PkgConfig::LIBDW (which brings
# libelf with it) and PkgConfig::LIBELF, with LibDW_FOUND and LibDW_VERSION.
find_package(PkgConfig QUIET)
if(PkgConfig_FOUND)
  pkg_check_modules(LIBDW QUIET IMPORTED_TARGET libdw)
  pkg_check_modules(LIBELF QUIET IMPORTED_TARGET libelf)
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(LibDW REQUIRED_VARS LIBDW_LINK_LIBRARIES LIBELF_LINK_LIBRARIES
                                  VERSION_VAR LIBDW_VERSION)
