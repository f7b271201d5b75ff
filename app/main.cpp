// quantscope: subcommands run headless; no subcommand opens the workbench.
#include <cstdio>

#include "app/cli.h"
#ifdef QS_WITH_GUI
#include "ui/workbench.h"
#endif

int main(int argc, char** argv) {
  if (qs::cli::isSubcommand(argc, argv)) return qs::cli::runCli(argc, argv);
#ifdef QS_WITH_GUI
  return qs::ui::runWorkbench(argc, argv);
#else
  std::fprintf(stderr, "quantscope: built without the GUI; use a subcommand: quantscope info|run --help\n");
  return argc > 1 ? qs::cli::kExitBadInput : qs::cli::kExitOk;
#endif
}
