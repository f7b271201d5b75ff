// The application icon, painted in code (the SVG in resources/ is the installed copy; Qt's SVG
// module is not a dependency).
#pragma once

#include <QIcon>

namespace qs::ui {

QIcon appIcon();

}  // namespace qs::ui
