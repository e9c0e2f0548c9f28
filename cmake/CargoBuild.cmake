# Build step of the scope_profiler CMake project (run with cmake -P at build time):
#  1. `cargo build --locked` of the library and its helper executables, in the cargo target
#     directory shared with plain cargo builds;
#  2. the native libraries a static link of libscope_profiler.a needs: the libraries that
#     build scripts link (cargo's build-script-executed messages: HDF5, MPI, ...) followed by
#     what the Rust standard library needs (`rustc --print native-static-libs` of an empty
#     staticlib). Written to ScopeProfilerNativeLibs.cmake and the pkg-config files.
#
# Variables (-D): CARGO, SOURCE_DIR, TARGET_DIR, PROFILE, FEATURES (comma separated),
# BUILD_ARGS (package/target selection, default "--package scope_profiler --lib --bins"),
# BINARY_DIR, PC_TEMPLATE, PC_PREFIX_REL, INSTALL_LIBDIR, INSTALL_INCLUDEDIR, VERSION.
cmake_minimum_required(VERSION 3.25)

foreach(var CARGO SOURCE_DIR TARGET_DIR PROFILE BINARY_DIR PC_TEMPLATE VERSION)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "CargoBuild.cmake: ${var} is not set")
  endif()
endforeach()

if(NOT BUILD_ARGS)
  set(BUILD_ARGS "--package scope_profiler --lib --bins")
endif()
separate_arguments(_selection UNIX_COMMAND "${BUILD_ARGS}")
set(_args build --locked --profile "${PROFILE}" ${_selection}
    --target-dir "${TARGET_DIR}" --message-format=json-render-diagnostics)
if(FEATURES)
  list(APPEND _args --features "${FEATURES}")
endif()
# Progress and diagnostics go to stderr as usual; the JSON messages come on stdout.
execute_process(
  COMMAND "${CARGO}" ${_args}
  WORKING_DIRECTORY "${SOURCE_DIR}"
  OUTPUT_VARIABLE _json
  RESULT_VARIABLE _rc)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "cargo build of scope_profiler failed (${_rc})")
endif()

# --- native libraries from the build scripts ----------------------------------------------
set(_libs "")
set(_dirs "")
set(_with_mpi FALSE)
set(_marker "{\"reason\":\"build-script-executed\"")
set(_rest "${_json}")
while(TRUE)
  string(FIND "${_rest}" "${_marker}" _at)
  if(_at EQUAL -1)
    break()
  endif()
  string(SUBSTRING "${_rest}" ${_at} -1 _rest)
  string(FIND "${_rest}" "\n" _eol)
  if(_eol EQUAL -1)
    set(_line "${_rest}")
    set(_rest "")
  else()
    string(SUBSTRING "${_rest}" 0 ${_eol} _line)
    math(EXPR _next "${_eol} + 1")
    string(SUBSTRING "${_rest}" ${_next} -1 _rest)
  endif()

  string(JSON _nlibs LENGTH "${_line}" linked_libs)
  set(_linked_any FALSE)
  if(_nlibs GREATER 0)
    math(EXPR _last "${_nlibs} - 1")
    foreach(_i RANGE ${_last})
      string(JSON _spec GET "${_line}" linked_libs ${_i})
      # [KIND[:MODIFIERS]=]NAME[:RENAME]
      set(_kind "dylib")
      set(_name "${_spec}")
      if(_spec MATCHES "^([^=]*)=(.*)$")
        set(_kind "${CMAKE_MATCH_1}")
        set(_name "${CMAKE_MATCH_2}")
      endif()
      if(_name MATCHES "^[^:]*:(.+)$")
        set(_name "${CMAKE_MATCH_1}")
      endif()
      # Static native libraries are bundled into libscope_profiler.a, unless -bundle.
      if(_kind MATCHES "^static" AND NOT _kind MATCHES "-bundle")
        continue()
      endif()
      if(_kind MATCHES "^framework")
        continue()
      endif()
      list(APPEND _libs "-l${_name}")
      set(_linked_any TRUE)
      if(_name MATCHES "^mpi")
        set(_with_mpi TRUE)
      endif()
    endforeach()
  endif()
  if(_linked_any)
    string(JSON _npaths LENGTH "${_line}" linked_paths)
    if(_npaths GREATER 0)
      math(EXPR _last "${_npaths} - 1")
      foreach(_i RANGE ${_last})
        string(JSON _path GET "${_line}" linked_paths ${_i})
        if(_path MATCHES "^(native|all)=(.*)$")
          set(_path "${CMAKE_MATCH_2}")
        elseif(_path MATCHES "^[a-z]+=")
          continue()
        endif()
        # Build scripts' own output directories only hold bundled static libraries.
        cmake_path(IS_PREFIX TARGET_DIR "${_path}" NORMALIZE _inside)
        if(NOT _inside)
          list(APPEND _dirs "${_path}")
        endif()
      endforeach()
    endif()
  endif()
endwhile()

# --- what the Rust standard library needs ---------------------------------------------------
if(DEFINED ENV{RUSTC})
  set(_rustc "$ENV{RUSTC}")
else()
  get_filename_component(_cargo_dir "${CARGO}" DIRECTORY)
  find_program(_rustc rustc HINTS "${_cargo_dir}" REQUIRED)
endif()
set(_probe "${BINARY_DIR}/native-libs-probe")
file(MAKE_DIRECTORY "${_probe}")
file(WRITE "${_probe}/probe.rs" "")
execute_process(
  COMMAND "${_rustc}" --crate-type staticlib --crate-name sp_native_probe --print native-static-libs
          "${_probe}/probe.rs" -o "${_probe}/libsp_native_probe.a"
  WORKING_DIRECTORY "${SOURCE_DIR}"
  OUTPUT_VARIABLE _out
  ERROR_VARIABLE _err
  RESULT_VARIABLE _rc)
if(NOT _rc EQUAL 0 OR NOT _err MATCHES "native-static-libs: ([^\n]*)")
  message(FATAL_ERROR "cannot ask ${_rustc} for the standard library's native libraries:\n${_err}")
endif()
string(STRIP "${CMAKE_MATCH_1}" _std)
separate_arguments(_std UNIX_COMMAND "${_std}")
list(APPEND _libs ${_std})

# Keep the first occurrence of each directory; keep libraries in order (duplicates may matter
# for static links, but not for these shared system libraries).
list(REMOVE_DUPLICATES _dirs)
list(REMOVE_DUPLICATES _libs)

set(_flags "")
foreach(_d IN LISTS _dirs)
  string(APPEND _flags "-L${_d} ")
endforeach()
list(JOIN _libs " " _lib_flags)
string(APPEND _flags "${_lib_flags}")

set(_cmake_file "${BINARY_DIR}/ScopeProfilerNativeLibs.cmake")
set(_content "# Generated by cmake/CargoBuild.cmake at build time: the native libraries that a static
# link of libscope_profiler.a needs, and whether the library was built with MPI.
set(ScopeProfiler_NATIVE_LINK_DIRS \"${_dirs}\")
set(ScopeProfiler_NATIVE_LIBS \"${_libs}\")
set(ScopeProfiler_NATIVE_LINK_FLAGS \"${_flags}\")
set(ScopeProfiler_WITH_MPI ${_with_mpi})
")
# Rewrite only on change, so that nothing depending on it is rebuilt needlessly.
set(_old "")
if(EXISTS "${_cmake_file}")
  file(READ "${_cmake_file}" _old)
endif()
if(NOT _old STREQUAL _content)
  file(WRITE "${_cmake_file}" "${_content}")
endif()

# pkg-config file (its prefix is relative to the installed .pc file, so it is relocatable).
set(NATIVE_LINK_FLAGS "${_flags}")
configure_file("${PC_TEMPLATE}" "${BINARY_DIR}/scope_profiler.pc" @ONLY)
