// The search bar above the graph: finds nodes and tensors by name (GraphView::findItems) and steps
// through the matches. Enter: next match, Shift+Enter: previous, Escape: close.
#pragma once

#include <QString>
#include <QWidget>
#include <cstdint>
#include <vector>

class QLabel;
class QLineEdit;

namespace qs::ui {

class GraphView;

class SearchBar : public QWidget {
  Q_OBJECT
 public:
  /// Searches `view`'s layout. Object names: "searchBar", its field "searchEdit".
  SearchBar(GraphView* view, QWidget* parent = nullptr);

  /// Shows the bar with the field focused and its text selected.
  void open();
  /// Moves to the next (or previous) match of `text`, which the field then shows; false when
  /// nothing matches.
  bool findNext(const QString& text, bool backwards = false);
  /// Forgets the matches (a new model is shown).
  void reset();

 signals:
  /// The layout item of the current match, to select and centre.
  void matchSelected(int item);

 private:
  void onEdited(const QString& text);

  GraphView* m_view;
  QLineEdit* m_edit = nullptr;
  QLabel* m_count = nullptr;
  std::vector<int32_t> m_matches;
  QString m_matchText;
  int m_matchIndex = -1;
};

}  // namespace qs::ui
