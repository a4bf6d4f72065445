# Finds cpp-httplib (Debian's libcpp-httplib-dev: a header and a compiled library) through
# pkg-config, for `trainshim metrics --listen`, and defines the imported target PkgConfig::CPPHTTPLIB
# with CppHttplib_FOUND and CppHttplib_VERSION.
find_package(PkgConfig QUIET)
if(PkgConfig_FOUND)
  pkg_check_modules(CPPHTTPLIB QUIET IMPORTED_TARGET cpp-httplib)
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(CppHttplib REQUIRED_VARS CPPHTTPLIB_LINK_LIBRARIES VERSION_VAR CPPHTTPLIB_VERSION)
