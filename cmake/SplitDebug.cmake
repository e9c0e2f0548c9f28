# Run at install time (install(CODE) in CMakeLists.txt): each installed shared library and
# program in FILES (paths under the prefix; links and missing files are skipped) is stripped of
# its debug information, which goes to .debug/<name>.debug beside it, named in the binary's
# .gnu_debuglink (with its CRC): gdb, addr2line, Rust backtraces and the library's own
# symbolizer look there. The binaries keep their dynamic symbols; the full symbol table is in
# the debug file.
# Inputs: PREFIX, OBJCOPY, FILES (a ;-list).
if(NOT OBJCOPY)
  message(WARNING "scope_profiler: no objcopy: the installed binaries keep their debug information")
  return()
endif()
foreach(_rel IN LISTS FILES)
  set(_f "${PREFIX}/${_rel}")
  if(IS_SYMLINK "${_f}" OR NOT EXISTS "${_f}" OR IS_DIRECTORY "${_f}")
    continue()
  endif()
  get_filename_component(_dir "${_f}" DIRECTORY)
  get_filename_component(_name "${_f}" NAME)
  file(MAKE_DIRECTORY "${_dir}/.debug")
  set(_dbg "${_dir}/.debug/${_name}.debug")
  execute_process(COMMAND "${OBJCOPY}" --only-keep-debug "${_f}" "${_dbg}"
                  RESULT_VARIABLE _rc ERROR_VARIABLE _err)
  if(NOT _rc EQUAL 0)
    message(WARNING "scope_profiler: ${_rel} keeps its debug information: ${_err}")
    file(REMOVE "${_dbg}")
    continue()
  endif()
  # --add-gnu-debuglink reads the debug file by the path given and stores its name only.
  execute_process(COMMAND "${OBJCOPY}" --strip-unneeded
                          "--add-gnu-debuglink=.debug/${_name}.debug" "${_f}" "${_f}.stripped"
                  WORKING_DIRECTORY "${_dir}" RESULT_VARIABLE _rc ERROR_VARIABLE _err)
  if(NOT _rc EQUAL 0)
    message(WARNING "scope_profiler: ${_rel} keeps its debug information: ${_err}")
    file(REMOVE "${_f}.stripped" "${_dbg}")
    continue()
  endif()
  file(RENAME "${_f}.stripped" "${_f}")
  file(CHMOD "${_f}" PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)
  message(STATUS "Split debug information: ${_rel} -> .debug/${_name}.debug")
endforeach()
