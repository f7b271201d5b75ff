# cmake -DCXX=compiler -DINCLUDES=dir|dir|... -DSOURCE=file.cpp [-DEXPECT_MISSING=header] -P compile_probe.cmake
# Compiles SOURCE (syntax only) with those include directories. Without EXPECT_MISSING it passes
# when SOURCE compiles. With it, it passes only when the compiler refuses SOURCE because it cannot
# find that header (an upward include), and fails otherwise, including when SOURCE compiles.
string(REPLACE "|" ";" dirs "${INCLUDES}")
set(flags)
foreach(d IN LISTS dirs)
  list(APPEND flags "-I${d}")
endforeach()
execute_process(COMMAND ${CXX} -std=c++20 -march=x86-64-v3 -fsyntax-only ${flags} ${SOURCE}
                RESULT_VARIABLE rc ERROR_VARIABLE err)
message("include path: ${INCLUDES}")
if(EXPECT_MISSING)
  if(rc EQUAL 0)
    message(FATAL_ERROR "${SOURCE}: compiles, but its include of ${EXPECT_MISSING} should have been refused")
  endif()
  string(FIND "${err}" "${EXPECT_MISSING}: No such file" at)
  if(at LESS 0)
    message("${err}")
    message(FATAL_ERROR "${SOURCE}: failed for another reason than the missing ${EXPECT_MISSING}")
  endif()
  message("${SOURCE}: refused as it should be: ${EXPECT_MISSING} is not on qs_engine's include path")
  return()
endif()
if(NOT rc EQUAL 0)
  message("${err}")
  message(FATAL_ERROR "${SOURCE}: does not compile with qs_engine's include path")
endif()
message("${SOURCE}: compiles with qs_engine's include path")
