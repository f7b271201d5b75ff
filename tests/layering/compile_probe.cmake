# cmake -DCXX=compiler -DINCLUDES=dir|dir|... -DSOURCE=file.cpp -P compile_probe.cmake
# Compiles SOURCE (syntax only) with those include directories; fails as the compiler does.
string(REPLACE "|" ";" dirs "${INCLUDES}")
set(flags)
foreach(d IN LISTS dirs)
  list(APPEND flags "-I${d}")
endforeach()
execute_process(COMMAND ${CXX} -std=c++20 -march=x86-64-v3 -fsyntax-only ${flags} ${SOURCE}
                RESULT_VARIABLE rc ERROR_VARIABLE err)
message("include path: ${INCLUDES}")
if(NOT rc EQUAL 0)
  message("${err}")
  message(FATAL_ERROR "${SOURCE}: does not compile with qs_engine's include path")
endif()
message("${SOURCE}: compiles with qs_engine's include path")
