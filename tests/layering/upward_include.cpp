// A kernel-level source that includes a header of the analysis layer above it: must not compile
// with qs_engine's include path (test layering_build_upward_include, expected to fail).
#include "core/analysis/results.h"
#include "core/numeric/metrics.h"

int main() { return 0; }
