# Project-wide warnings; CI builds with MNEMO_WERROR=ON.
add_library(mnemo_warnings INTERFACE)
target_compile_options(mnemo_warnings INTERFACE
  -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wcast-align -Wunused
  -Woverloaded-virtual -Wnull-dereference -Wimplicit-fallthrough -Wformat=2
  $<$<BOOL:${MNEMO_WERROR}>:-Werror>)

# mnemo_asio_sources(file...): sources of the current directory that inline Boost.Asio. GCC 12
# reports Asio's own scheduler code (from /usr/include) as a potential null dereference, and
# under -fsanitize=thread every std::atomic_thread_fence in its handler invocation and reference
# counts (-Wtsan, an error with MNEMO_WERROR). The fences stay (TSan just does not model them);
# the project's own code keeps both warnings everywhere else.
function(mnemo_asio_sources)
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    set(options -Wno-null-dereference)
    if(MNEMO_SANITIZE MATCHES "thread")
      list(APPEND options -Wno-tsan)
    endif()
    set_source_files_properties(${ARGN} PROPERTIES COMPILE_OPTIONS "${options}")
  endif()
endfunction()
