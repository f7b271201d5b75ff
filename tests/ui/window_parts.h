// The widgets and item models of a MainWindow (and of its dialogs), reached by object name as the
// tests need them; the names are listed in ui/main_window.h.
#pragma once

#include <QObject>
#include <QString>
#include <QtGlobal>

namespace qs::test {

/// The child of `parent` of type T named `name`; a test that asks for a missing one stops here.
template <class T>
T* part(const QObject& parent, const char* name) {
  T* p = parent.findChild<T*>(QString::fromLatin1(name));
  if (!p) qFatal("no %s named '%s'", T::staticMetaObject.className(), name);
  return p;
}

}  // namespace qs::test
