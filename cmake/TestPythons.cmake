# The CPython interpreters the tests run on (tests/python_stack: each of them; tests/integration:
# those whose stacks trainshim reads, plus one older one). Found once, at the first configure, in
# pyenv's versions ($PYENV_ROOT, ~/.pyenv) and in every directory of PATH; the cache variable
# TRAINSHIM_TEST_PYTHONS keeps them and may be set to any list of interpreters instead.
#
# Sets, in parallel lists, one entry per distinct interpreter:
#   TRAINSHIM_TEST_PYTHON_EXECUTABLES   sys.executable
#   TRAINSHIM_TEST_PYTHON_VERSIONS      major.minor.micro
#   TRAINSHIM_TEST_PYTHON_INCLUDES      its Python.h directory
#   TRAINSHIM_TEST_PYTHON_PLATINCLUDES  its platform-specific headers' directory

# Every python3.<minor>, 3.6 to 3.15, in minor order; within one minor pyenv's builds come first.
function(trainshim_find_pythons out)
  set(pyenv_roots)
  foreach(root "$ENV{PYENV_ROOT}" "$ENV{HOME}/.pyenv")
    if(root AND NOT root STREQUAL "/.pyenv" AND NOT root IN_LIST pyenv_roots)
      list(APPEND pyenv_roots "${root}")
    endif()
  endforeach()
  string(REPLACE ":" ";" path_dirs "$ENV{PATH}")
  set(candidates)
  foreach(minor RANGE 6 15)
    foreach(root IN LISTS pyenv_roots)
      file(GLOB pyenv_builds "${root}/versions/3.${minor}*/bin/python3.${minor}")
      list(APPEND candidates ${pyenv_builds})
    endforeach()
    foreach(dir IN LISTS path_dirs)
      # pyenv's shims run whichever version is selected: its versions were globbed above.
      if(dir AND NOT dir MATCHES "/shims$" AND EXISTS "${dir}/python3.${minor}")
        list(APPEND candidates "${dir}/python3.${minor}")
      endif()
    endforeach()
  endforeach()
  set(${out} ${candidates} PARENT_SCOPE)
endfunction()

if(NOT DEFINED TRAINSHIM_TEST_PYTHONS)
  trainshim_find_pythons(_trainshim_python_candidates)
  set(TRAINSHIM_TEST_PYTHONS ${_trainshim_python_candidates} CACHE STRING
      "CPython interpreters the Python stack tests run on (a ;-separated list; found at the first configure)")
endif()

# Each interpreter once (pyenv's shims and links lead to the same one), described by itself.
set(TRAINSHIM_TEST_PYTHON_EXECUTABLES)
set(TRAINSHIM_TEST_PYTHON_VERSIONS)
set(TRAINSHIM_TEST_PYTHON_INCLUDES)
set(TRAINSHIM_TEST_PYTHON_PLATINCLUDES)
set(_trainshim_python_seen)
foreach(_candidate IN LISTS TRAINSHIM_TEST_PYTHONS)
  execute_process(
    COMMAND "${_candidate}" -c "import sys, sysconfig; p = sysconfig.get_paths(); \
print(sys.executable); print('%d.%d.%d' % sys.version_info[:3]); print(p['include']); print(p['platinclude'])"
    OUTPUT_VARIABLE _info RESULT_VARIABLE _rc ERROR_QUIET TIMEOUT 30)
  if(NOT _rc EQUAL 0)
    message(STATUS "Python tests: ${_candidate} does not run, left out")
    continue()
  endif()
  string(STRIP "${_info}" _info)
  string(REPLACE "\n" ";" _info "${_info}")
  list(GET _info 0 _executable)
  file(REAL_PATH "${_executable}" _real)
  if(_real IN_LIST _trainshim_python_seen)
    continue()
  endif()
  list(APPEND _trainshim_python_seen "${_real}")
  list(GET _info 1 _version)
  list(GET _info 2 _include)
  list(GET _info 3 _platinclude)
  list(APPEND TRAINSHIM_TEST_PYTHON_EXECUTABLES "${_executable}")
  list(APPEND TRAINSHIM_TEST_PYTHON_VERSIONS "${_version}")
  list(APPEND TRAINSHIM_TEST_PYTHON_INCLUDES "${_include}")
  list(APPEND TRAINSHIM_TEST_PYTHON_PLATINCLUDES "${_platinclude}")
endforeach()
