// The project file reader (ui/project_file.cpp) on hostile input: what fuzz_project found, and the
// validation it led to. Every refusal is one line naming the file; what is accepted round-trips.
#include <QTemporaryDir>
#include <QtTest>

#include "ui/project_file.h"

using namespace qs::ui;

class ProjectFileTest : public QObject {
  Q_OBJECT

  static QString refusal(const QByteArray& json) {
    Project p;
    QString error;
    if (projectFromJson(json, QStringLiteral("/data/p.qsproj"), p, error)) return QStringLiteral("<accepted>");
    return error;
  }

 private slots:
  // fuzz_project: an unknown method holding a newline was echoed into a two-line error. The names
  // are parsed by the core's parsers, with their messages.
  void controlCharactersStayOnOneLine() {
    const QString e = refusal(R"({"quantscope_project": 1, "model": "m.onnx", "calibration": {"method": "max\n  p3"}})");
    QCOMPARE(e, QStringLiteral("/data/p.qsproj: --calibration-method 'max\\x0a  p3': expected auto, max, entropy, percentile or mse"));
    const QString m = refusal(R"({"quantscope_project": 1, "model": "m.onnx", "calibration": {"mode": "int8\r"}})");
    QCOMPARE(m, QStringLiteral("/data/p.qsproj: --quantize-mode 'int8\\x0d': expected int8 or fp8"));
  }

  // fuzz_project: "/./m.onnx" was kept as written but saved as "/m.onnx", so a saved project read
  // back named the model differently. Absolute paths are cleaned on reading.
  void absolutePathsAreCleanedAndRoundTrip() {
    Project p;
    QString error;
    QVERIFY(projectFromJson(R"({"quantscope_project": 1, "model": "/./models/../m.onnx"})", QStringLiteral("/data/p.qsproj"), p,
                            error));
    QCOMPARE(p.modelPath, QStringLiteral("/m.onnx"));
    Project again;
    QVERIFY(projectFromJson(projectToJson(p, QStringLiteral("/data/p.qsproj")), QStringLiteral("/data/p.qsproj"), again, error));
    QCOMPARE(again.modelPath, p.modelPath);
  }

  // fuzz_project in CI: a model named ":fernx" beside the project was written as ":fernx", which
  // Qt reads as a resource path (absolute), so the project reopened a different file.
  void namesStartingWithAColonStayInTheProjectFolder() {
    Project p;
    QString error;
    QVERIFY(projectFromJson(R"({"quantscope_project": 1, "model": "./:fernx"})", QStringLiteral("/data/p.qsproj"), p, error));
    QCOMPARE(p.modelPath, QStringLiteral("/data/:fernx"));
    const QByteArray saved = projectToJson(p, QStringLiteral("/data/p.qsproj"));
    QVERIFY2(saved.contains("\"./:fernx\""), saved.constData());
    Project again;
    QVERIFY(projectFromJson(saved, QStringLiteral("/data/p.qsproj"), again, error));
    QCOMPARE(again.modelPath, p.modelPath);
    // Written by hand without the "./", it still names the file in the project's folder.
    QVERIFY(projectFromJson(R"({"quantscope_project": 1, "model": ":fernx"})", QStringLiteral("/data/p.qsproj"), p, error));
    QCOMPARE(p.modelPath, QStringLiteral("/data/:fernx"));
  }

  // Numbers that used to reach casts or divisions unchecked ("samples": 1e30 is UB as int64; a std
  // of 0 divides every pixel by zero).
  void numbersOutOfRangeAreRefused() {
    const struct {
      const char* json;
      const char* expect;
    } cases[] = {
        {R"({"quantscope_project": 1, "model": "m", "calibration": {"samples": 1e30}})", "\"samples\" must be a number in"},
        {R"({"quantscope_project": 1, "model": "m", "calibration": {"samples": 2.5}})", "\"samples\" must be an integer"},
        {R"({"quantscope_project": 1, "model": "m", "calibration": {"width": -3}})", "\"width\" must be a number in"},
        {R"({"quantscope_project": 1, "model": "m", "calibration": {"std": [1, 0, 1]}})", "\"std\" must be 3 numbers"},
        // fuzz_project: 2e-94 passed as non-zero but became 0 as a float.
        {R"({"quantscope_project": 1, "model": "m", "calibration": {"std": [2e-94, 225, 5]}})", "\"std\" must be 3 numbers"},
        {R"({"quantscope_project": 1, "model": "m", "calibration": {"mean": [1, 2]}})", "\"mean\" must be 3 numbers"},
        // fuzz_project: 9.99...e29 is within 1e30 as a double, but not as the float stored (the
        // project then failed to reread what it wrote).
        {R"({"quantscope_project": 1, "model": "m", "calibration": {"std": [0.229, 999999999999999999999999999990.2, 0.225]}})",
         "\"std\" must be 3 numbers"},
        {R"({"quantscope_project": 1, "model": "m", "calibration": {"scale": -999999999999999999999999999990.2}})",
         "\"scale\" must be a number"},
        {R"({"quantscope_project": 1, "model": "m", "calibration": {"percentile": 101}})", "\"percentile\" must be a number"},
        {R"({"quantscope_project": 1, "model": "m", "calibration": {"scale": "big"}})", "\"scale\" must be a number"},
        {R"({"quantscope_project": 1, "model": "m", "excluded_nodes": [1, 2]})", "\"excluded_nodes\" must be a list"},
        {R"({"quantscope_project": 1, "model": "m", "view": {"threshold_db": 1e300}})", "\"threshold_db\" must be a number"},
        // The shapes of random inputs: positive integers, at most 8 of them, none beyond 2^20.
        {R"({"quantscope_project": 1, "model": "m", "calibration": {"shapes": [1, 3]}})", "\"shapes\" must map input names"},
        {R"({"quantscope_project": 1, "model": "m", "calibration": {"shapes": {"x": [1, 0, 3]}}})",
         "\"shapes\": \"x\" must be 1 to 8 integers in [1, 1048576]"},
        {R"({"quantscope_project": 1, "model": "m", "calibration": {"shapes": {"x": [1, 2.5]}}})", "\"shapes\": \"x\" must be"},
        {R"({"quantscope_project": 1, "model": "m", "calibration": {"shapes": {"x": []}}})", "\"shapes\": \"x\" must be"},
        {R"({"quantscope_project": 1, "model": "m", "calibration": {"shapes": {"x": "1x3x640x640"}}})", "\"shapes\": \"x\" must be"},
        {R"({"quantscope_project": 1, "model": "m", "calibration": {"shapes": {"x": [1, 3, 1e7]}}})", "\"shapes\": \"x\" must be"},
        {R"({"quantscope_project": 1, "model": "m", "calibration": {"shapes": {"x": [1, 1, 1, 1, 1, 1, 1, 1, 1]}}})",
         "\"shapes\": \"x\" must be"},
        {R"({"quantscope_project": 1, "model": "m", "calibration": {"shapes": {"a\nb": [-1]}}})", "\"shapes\": \"a\\x0ab\" must be"},
    };
    for (const auto& c : cases) {
      const QString e = refusal(c.json);
      QVERIFY2(e.startsWith(QStringLiteral("/data/p.qsproj: ")) && e.contains(QLatin1String(c.expect)),
               qPrintable(QStringLiteral("%1 -> %2").arg(QLatin1String(c.json), e)));
    }
    // Absent fields take their defaults.
    Project p;
    QString error;
    QVERIFY(projectFromJson(R"({"quantscope_project": 1, "model": "m.onnx"})", QStringLiteral("/data/p.qsproj"), p, error));
    QCOMPARE(p.calibration.data.maxSamples, (int64_t)-1);
    QCOMPARE(p.calibration.data.image.std[1], 1.0f);
    QCOMPARE(p.thresholdDb, 20.0);
  }

  // Autosaves carry where the session came from; ordinary projects do not write the block.
  void autosaveFieldsRoundTrip() {
    Project p;
    p.modelPath = QStringLiteral("/data/m.onnx");
    QVERIFY(!projectToJson(p, QStringLiteral("/data/p.qsproj")).contains("\"autosave\""));
    p.autosaveOf = QStringLiteral("/home/u/det.qsproj");
    p.autosavedAt = QDateTime(QDate(2026, 11, 24), QTime(10, 30, 5));
    Project back;
    QString error;
    QVERIFY(projectFromJson(projectToJson(p, QStringLiteral("/tmp/a.qsproj")), QStringLiteral("/tmp/a.qsproj"), back, error));
    QCOMPARE(back.autosaveOf, p.autosaveOf);
    QCOMPARE(back.autosavedAt, p.autosavedAt);
  }

  // The shapes of inputs with symbolic dims (random calibration inputs) are written and read back.
  void shapesRoundTrip() {
    Project p;
    p.modelPath = QStringLiteral("/data/m.onnx");
    p.calibration.data.shapes["x"] = {1, 3, 640, 640};
    p.calibration.data.shapes["tokens"] = {2, 128};
    const QByteArray json = projectToJson(p, QStringLiteral("/data/p.qsproj"));
    Project back;
    QString error;
    QVERIFY2(projectFromJson(json, QStringLiteral("/data/p.qsproj"), back, error), qPrintable(error));
    QVERIFY(back.calibration.data.shapes == p.calibration.data.shapes);
    // Absent: none, as in projects written before the field existed.
    QVERIFY(projectFromJson(R"({"quantscope_project": 1, "model": "m.onnx"})", QStringLiteral("/data/p.qsproj"), back, error));
    QVERIFY(back.calibration.data.shapes.empty());
  }

  void oversizedFileIsRefusedBeforeReading() {
    QTemporaryDir dir;
    const QString path = dir.filePath(QStringLiteral("big.qsproj"));
    QFile f(path);
    QVERIFY(f.open(QIODevice::WriteOnly));
    QVERIFY(f.resize(qint64(65) << 20));  // sparse
    f.close();
    Project p;
    QString error;
    QVERIFY(!loadProject(path, p, error));
    QVERIFY2(error.startsWith(path) && error.contains(QStringLiteral("too large for a project file")), qPrintable(error));
  }
};

int runProjectFileTests(int argc, char** argv) {
  ProjectFileTest t;
  return QTest::qExec(&t, argc, argv);
}
#include "test_project_file.moc"
