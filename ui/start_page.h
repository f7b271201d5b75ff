// The central widget while no model is open: open a file, the sample model, or a recent file.
#pragma once

#include <QWidget>

class QLabel;
class QPushButton;
class QVBoxLayout;

namespace qs::ui {

class StartPage : public QWidget {
  Q_OBJECT
 public:
  explicit StartPage(QWidget* parent = nullptr);
  /// Path of the sample model, or empty when it is not on this machine.
  void setSampleModel(const QString& path);
  void setRecentFiles(const QStringList& paths);

 signals:
  void openDialogRequested();
  void openRequested(const QString& path);

 private:
  QPushButton* m_sampleButton = nullptr;
  QLabel* m_sampleHint = nullptr;
  QWidget* m_recentBox = nullptr;
  QVBoxLayout* m_recentList = nullptr;
  QString m_samplePath;
};

}  // namespace qs::ui
