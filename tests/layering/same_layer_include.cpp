// The control of upward_include.cpp: the same kind of source with headers of its own layer and
// below compiles with qs_engine's include path.
#include "core/exec/executor.h"
#include "core/numeric/metrics.h"

int main() { return 0; }
