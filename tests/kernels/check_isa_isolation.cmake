# Fails if an object compiled with AVX2/AVX-512 flags defines a weak (COMDAT) symbol: the linker
# keeps one copy of such a symbol for the whole program, so an inline function emitted there
# could end up serving the scalar code on a CPU without those instructions.
#   cmake -DNM=<nm> -DOBJECTS=<a.o;b.o;...> -P check_isa_isolation.cmake
set(offenders "")
foreach(object IN LISTS OBJECTS)
  if(NOT object MATCHES "_avx")
    continue()
  endif()
  execute_process(COMMAND ${NM} -C --defined-only "${object}" OUTPUT_VARIABLE symbols RESULT_VARIABLE status)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "nm failed on ${object}")
  endif()
  string(REGEX MATCHALL "[^\n]* [WVu] [^\n]*" weak "${symbols}")
  foreach(line IN LISTS weak)
    # DW.ref.__gxx_personality_v0 is data (the exception-handling personality pointer), not code.
    if(line MATCHES "DW\\.ref\\.")
      continue()
    endif()
    string(APPEND offenders "  ${object}: ${line}\n")
  endforeach()
endforeach()
if(offenders)
  message(FATAL_ERROR "weak symbols in ISA-specific objects:\n${offenders}")
endif()
message(STATUS "ISA-specific objects define no weak symbols")
