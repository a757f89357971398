# CMake package config of the mqstate C SDK: `find_package(mqstate)` with
# CMAKE_PREFIX_PATH (or mqstate_DIR) pointing at the unpacked SDK. Relocatable: every path is
# relative to this file (lib/cmake/mqstate/).
#
# Imported targets:
#   mqstate::mqstate         the shared library (lib/libmqstate.so)
#   mqstate::mqstate_static  the static library (lib/libmqstate.a) and the system libraries
#                            the Rust runtime inside it needs
get_filename_component(_mqstate_prefix "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)

include(CMakeFindDependencyMacro)
set(THREADS_PREFER_PTHREAD_FLAG ON)
find_dependency(Threads)

# The musl SDKs have no shared library: mqstate::mqstate exists only where libmqstate.so does.
if(NOT TARGET mqstate::mqstate AND EXISTS "${_mqstate_prefix}/lib/libmqstate.so")
  add_library(mqstate::mqstate SHARED IMPORTED)
  set_target_properties(mqstate::mqstate PROPERTIES
    IMPORTED_LOCATION "${_mqstate_prefix}/lib/libmqstate.so"
    IMPORTED_SONAME "libmqstate.so"
    INTERFACE_INCLUDE_DIRECTORIES "${_mqstate_prefix}/include")
endif()

if(NOT TARGET mqstate::mqstate_static)
  add_library(mqstate::mqstate_static STATIC IMPORTED)
  set_target_properties(mqstate::mqstate_static PROPERTIES
    IMPORTED_LOCATION "${_mqstate_prefix}/lib/libmqstate.a"
    IMPORTED_LINK_INTERFACE_LANGUAGES "C"
    INTERFACE_INCLUDE_DIRECTORIES "${_mqstate_prefix}/include"
    # What `pkg-config --static --libs mqstate` lists as Libs.private.
    INTERFACE_LINK_LIBRARIES "Threads::Threads;${CMAKE_DL_LIBS};m;rt;util;gcc_s")
  # A musl SDK: the unwinder shipped beside the library instead of libgcc_s (scripts/lib.sh).
  if(EXISTS "${_mqstate_prefix}/lib/libmqstate_unwind.a")
    set_target_properties(mqstate::mqstate_static PROPERTIES
      INTERFACE_LINK_LIBRARIES "${_mqstate_prefix}/lib/libmqstate_unwind.a;c")
  endif()
endif()

set(mqstate_INCLUDE_DIRS "${_mqstate_prefix}/include")
if(TARGET mqstate::mqstate)
  set(mqstate_LIBRARIES mqstate::mqstate)
else()
  set(mqstate_LIBRARIES mqstate::mqstate_static)
endif()
unset(_mqstate_prefix)
