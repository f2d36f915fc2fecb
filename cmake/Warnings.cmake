# Project-wide warnings; CI builds with MNEMO_WERROR=ON.
add_library(mnemo_warnings INTERFACE)
target_compile_options(mnemo_warnings INTERFACE
  -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wcast-align -Wunused
  -Woverloaded-virtual -Wnull-dereference -Wimplicit-fallthrough -Wformat=2
  $<$<BOOL:${MNEMO_WERROR}>:-Werror>)
