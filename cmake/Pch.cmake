# Precompiled headers. A clean build (CI builds three presets from scratch on two cores) spent
# most of its time parsing the same headers in every file: the standard containers, fmt,
# nlohmann/json, GoogleTest. They are compiled once per kind of target and reused:
#   mnemo_precompile(target)       a static library of src/ (-fPIC), from mnemo_pch_lib
#   mnemo_precompile_test(target)  a test executable, from mnemo_pch_test (tests/CMakeLists.txt)
# The kernels are left out (their own -m flags would make the header unusable). GCC only: clang
# (the fuzz preset) refuses a reused header on any flag difference instead of ignoring it.
# -DMNEMO_PCH=OFF builds without them (to check that every file includes what it uses).
option(MNEMO_PCH "Precompile the headers most files include" ON)
if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  set(MNEMO_PCH OFF)
endif()

set(MNEMO_PCH_HEADERS ${PROJECT_SOURCE_DIR}/cmake/mnemo_pch.h)

if(MNEMO_PCH)
  add_library(mnemo_pch_lib STATIC ${PROJECT_SOURCE_DIR}/cmake/pch_anchor.cpp)
  target_link_libraries(mnemo_pch_lib PRIVATE fmt::fmt nlohmann_json::nlohmann_json Threads::Threads mnemo_warnings)
  target_precompile_headers(mnemo_pch_lib PRIVATE ${MNEMO_PCH_HEADERS})
endif()

function(mnemo_precompile target)
  if(MNEMO_PCH)
    # The same definitions as the header was compiled with (fmt's FMT_SHARED), or GCC ignores it.
    target_link_libraries(${target} PRIVATE fmt::fmt nlohmann_json::nlohmann_json)
    target_precompile_headers(${target} REUSE_FROM mnemo_pch_lib)
  endif()
endfunction()

# mnemo_pch_string_false_positives(file...): files where GCC 12 at -O3, only through a
# precompiled header, reports libstdc++'s own small-string copy (a std::string moved through
# Result<std::string>) as out of bounds: -Warray-bounds, -Wstringop-overflow and
# -Wstringop-overread from inside char_traits.h, which it would otherwise treat as a system
# header and keep quiet about. Built without a precompiled header the same files are clean and
# keep the warnings; only these files lose them.
function(mnemo_pch_string_false_positives)
  if(MNEMO_PCH)
    set_property(SOURCE ${ARGN} APPEND PROPERTY COMPILE_OPTIONS
                 -Wno-array-bounds -Wno-stringop-overflow -Wno-stringop-overread)
  endif()
endfunction()
