// Entry point of the desktop workbench (app/main.cpp calls it when no subcommand is given).
#pragma once

namespace qs::ui {

/// Creates the QApplication and the main window, offers to restore a session autosaved by a run that
/// did not close cleanly, opens argv[1] when given (and nothing was restored), runs the event loop.
/// Hidden, for documentation and checks: QS_SCREENSHOT=out.png saves a grab of the window once the
/// model is shown (or the start page, without a model) and quits; QS_SCREENSHOT_SIZE=WxH,
/// QS_SCREENSHOT_SELECT=name (select the first match), QS_SCREENSHOT_ZOOM=z or "fit" tune it.
int runWorkbench(int argc, char** argv);

}  // namespace qs::ui
