#include "ui/search_bar.h"

#include <QHBoxLayout>
#include <QKeyEvent>
#include <QLabel>
#include <QLineEdit>
#include <QToolButton>
#include <functional>

#include "ui/graph_view.h"

namespace qs::ui {

namespace {

// Search field that reports Enter/Shift+Enter and Escape.
class SearchEdit : public QLineEdit {
 public:
  using QLineEdit::QLineEdit;
  std::function<void(bool backwards)> onNext;
  std::function<void()> onClose;

 protected:
  void keyPressEvent(QKeyEvent* e) override {
    if ((e->key() == Qt::Key_Return || e->key() == Qt::Key_Enter) && onNext) {
      onNext(e->modifiers() & Qt::ShiftModifier);
      return;
    }
    if (e->key() == Qt::Key_Escape && onClose) {
      onClose();
      return;
    }
    QLineEdit::keyPressEvent(e);
  }
};

}  // namespace

SearchBar::SearchBar(GraphView* view, QWidget* parent) : QWidget(parent), m_view(view) {
  setObjectName(QStringLiteral("searchBar"));
  setAttribute(Qt::WA_StyledBackground);
  setStyleSheet(QStringLiteral("#searchBar { background: #eef1f4; border-bottom: 1px solid #d0d5db; }"));
  auto* sl = new QHBoxLayout(this);
  sl->setContentsMargins(8, 4, 8, 4);
  auto* edit = new SearchEdit(this);
  edit->setObjectName(QStringLiteral("searchEdit"));
  edit->setPlaceholderText(QStringLiteral("Find node or tensor name  (Enter: next, Shift+Enter: previous)"));
  edit->setClearButtonEnabled(true);
  edit->onNext = [this](bool back) { findNext(m_edit->text(), back); };
  edit->onClose = [this] {
    hide();
    m_view->setFocus();
  };
  m_edit = edit;
  m_count = new QLabel(this);
  m_count->setMinimumWidth(90);
  auto* close = new QToolButton(this);
  close->setText(QStringLiteral("✕"));
  close->setAutoRaise(true);
  connect(close, &QToolButton::clicked, this, &QWidget::hide);
  sl->addWidget(m_edit, 1);
  sl->addWidget(m_count);
  sl->addWidget(close);
  connect(m_edit, &QLineEdit::textEdited, this, &SearchBar::onEdited);
}

void SearchBar::open() {
  show();
  m_edit->setFocus();
  m_edit->selectAll();
}

void SearchBar::reset() {
  m_matches.clear();
  m_matchText.clear();
  m_matchIndex = -1;
}

void SearchBar::onEdited(const QString& text) {
  m_matches = m_view->findItems(text);
  m_matchText = text;
  m_matchIndex = -1;
  if (text.isEmpty()) {
    m_count->clear();
    m_edit->setStyleSheet(QString());
    return;
  }
  findNext(text);
}

bool SearchBar::findNext(const QString& text, bool backwards) {
  show();
  if (m_edit->text() != text) m_edit->setText(text);
  if (text != m_matchText || m_matchIndex < 0) {
    m_matches = m_view->findItems(text);
    m_matchText = text;
    m_matchIndex = -1;
  }
  const bool found = !m_matches.empty();
  m_edit->setStyleSheet(found || text.isEmpty() ? QString() : QStringLiteral("QLineEdit { background: #fde2e1; }"));
  if (!found) {
    m_count->setText(text.isEmpty() ? QString() : QStringLiteral("No matches"));
    m_matchIndex = -1;
    return false;
  }
  const int n = (int)m_matches.size();
  m_matchIndex = m_matchIndex < 0 ? (backwards ? n - 1 : 0) : (m_matchIndex + (backwards ? n - 1 : 1)) % n;
  m_count->setText(QStringLiteral("%1 of %2").arg(m_matchIndex + 1).arg(n));
  emit matchSelected(m_matches[(size_t)m_matchIndex]);
  return true;
}

}  // namespace qs::ui
