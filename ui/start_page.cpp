#include "ui/start_page.h"

#include <QFileInfo>
#include <QLabel>
#include <QPushButton>
#include <QToolButton>
#include <QVBoxLayout>

#include "ui/app_icon.h"

namespace qs::ui {

StartPage::StartPage(QWidget* parent) : QWidget(parent) {
  setObjectName(QStringLiteral("startPage"));
  setAutoFillBackground(true);
  QPalette pal = palette();
  pal.setColor(QPalette::Window, QColor(0xfa, 0xfb, 0xfc));
  setPalette(pal);

  auto* outer = new QVBoxLayout(this);
  outer->addStretch(2);
  auto* column = new QWidget(this);
  column->setMinimumWidth(460);
  column->setMaximumWidth(620);
  auto* col = new QVBoxLayout(column);
  col->setSpacing(10);

  auto* icon = new QLabel(column);
  icon->setPixmap(appIcon().pixmap(88, 88));
  icon->setAlignment(Qt::AlignHCenter);
  col->addWidget(icon);
  auto* title = new QLabel(QStringLiteral("Quantscope"), column);
  QFont tf = title->font();
  tf.setPointSizeF(tf.pointSizeF() * 2.2);
  tf.setBold(true);
  title->setFont(tf);
  title->setAlignment(Qt::AlignHCenter);
  col->addWidget(title);
  auto* subtitle = new QLabel(QStringLiteral("INT8 quantization error analysis for ONNX models"), column);
  subtitle->setAlignment(Qt::AlignHCenter);
  subtitle->setStyleSheet(QStringLiteral("color: #5c6670;"));
  col->addWidget(subtitle);
  col->addSpacing(18);

  auto* open = new QPushButton(QStringLiteral("Open model…"), column);
  open->setObjectName(QStringLiteral("openButton"));
  open->setMinimumHeight(34);
  open->setToolTip(QStringLiteral("Ctrl+O"));
  connect(open, &QPushButton::clicked, this, &StartPage::openDialogRequested);
  col->addWidget(open);
  m_sampleButton = new QPushButton(column);
  m_sampleButton->setObjectName(QStringLiteral("sampleButton"));
  m_sampleButton->setMinimumHeight(34);
  connect(m_sampleButton, &QPushButton::clicked, this, [this] { emit openRequested(m_samplePath); });
  col->addWidget(m_sampleButton);
  m_sampleHint = new QLabel(column);
  m_sampleHint->setWordWrap(true);
  m_sampleHint->setAlignment(Qt::AlignHCenter);
  m_sampleHint->setStyleSheet(QStringLiteral("color: #6b7580;"));
  col->addWidget(m_sampleHint);
  auto* drop = new QLabel(QStringLiteral("or drop an .onnx file on this window"), column);
  drop->setAlignment(Qt::AlignHCenter);
  drop->setStyleSheet(QStringLiteral("color: #8a939c;"));
  col->addWidget(drop);

  m_recentBox = new QWidget(column);
  auto* recentLayout = new QVBoxLayout(m_recentBox);
  recentLayout->setContentsMargins(0, 16, 0, 0);
  auto* recentTitle = new QLabel(QStringLiteral("Recent files"), m_recentBox);
  QFont rf = recentTitle->font();
  rf.setBold(true);
  recentTitle->setFont(rf);
  recentLayout->addWidget(recentTitle);
  m_recentList = new QVBoxLayout();
  m_recentList->setSpacing(2);
  recentLayout->addLayout(m_recentList);
  col->addWidget(m_recentBox);

  outer->addWidget(column, 0, Qt::AlignHCenter);
  outer->addStretch(3);
  setSampleModel(QString());
  setRecentFiles({});
}

void StartPage::setSampleModel(const QString& path) {
  m_samplePath = path;
  const bool present = !path.isEmpty();
  m_sampleButton->setText(present ? QStringLiteral("Open sample model: %1").arg(QFileInfo(path).fileName())
                                  : QStringLiteral("Sample model not found"));
  m_sampleButton->setEnabled(present);
  m_sampleButton->setToolTip(path);
  m_sampleHint->setText(present ? QString()
                                : QStringLiteral("Run scripts/setup.sh to fetch the PaddleOCR sample models "
                                                 "into .cache/models."));
  m_sampleHint->setVisible(!present);
}

void StartPage::setRecentFiles(const QStringList& paths) {
  while (QLayoutItem* item = m_recentList->takeAt(0)) {
    delete item->widget();
    delete item;
  }
  for (const QString& path : paths) {
    auto* b = new QToolButton(m_recentBox);
    b->setText(QFileInfo(path).fileName() + QStringLiteral("   ") + QFileInfo(path).absolutePath());
    b->setToolTip(path);
    b->setAutoRaise(true);
    b->setToolButtonStyle(Qt::ToolButtonTextOnly);
    b->setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Fixed);
    b->setStyleSheet(QStringLiteral("QToolButton { text-align: left; padding: 4px; color: #1f5fa8; }"));
    connect(b, &QToolButton::clicked, this, [this, path] { emit openRequested(path); });
    m_recentList->addWidget(b);
  }
  m_recentBox->setVisible(!paths.isEmpty());
}

}  // namespace qs::ui
