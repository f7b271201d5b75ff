#!/usr/bin/env python3
"""Checks the layering of the source tree (docs/design.md, "Layers").

Every #include "core/<dir>/...", "ui/..." or "app/..." in core/, ui/ and app/ must name a folder of
the same library or of one it links (core/CMakeLists.txt); no source file there may be longer than
800 lines. Prints each violation as `file:line: reason` and exits 1 when there is one.

  check_layers.py ROOT          check the tree at ROOT
  check_layers.py --self-test   check that a tree with an upward include and one with a long
                                file are refused, and a correct one is accepted
"""
import os
import re
import sys
import tempfile

# Library of each folder, and the libraries each library may include (itself and what it links).
LIBRARY = {
    "core/util": "util", "core/ir": "ir", "core/io": "io", "core/onnx": "onnx",
    "core/exec": "engine", "core/kernels": "engine", "core/numeric": "engine",
    "core/quant": "quant", "core/analysis": "analysis", "core/export": "export",
    "ui": "ui", "app": "app",
}
LINKS = {
    "util": [], "ir": ["util"], "io": ["ir"], "onnx": ["ir"], "engine": ["ir"],
    "quant": ["engine"], "analysis": ["quant", "io"], "export": ["analysis", "onnx"],
    "ui": ["export"], "app": ["export", "ui"],
}
MAX_LINES = 800
INCLUDE = re.compile(r'^\s*#\s*include\s+"((?:core/[a-z_]+)|ui|app)/')


def allowed(lib):
    seen, todo = set(), [lib]
    while todo:
        x = todo.pop()
        if x not in seen:
            seen.add(x)
            todo.extend(LINKS[x])
    return seen


def folder_of(rel):
    parts = rel.split("/")
    if parts[0] == "core" and len(parts) > 2:
        return "core/" + parts[1]
    return parts[0] if parts[0] in ("ui", "app") and len(parts) > 1 else None


def check(root):
    problems = []
    for top in ("core", "ui", "app"):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for f in sorted(files):
                if not f.endswith((".cpp", ".h", ".in")):
                    continue
                path = os.path.join(dirpath, f)
                rel = os.path.relpath(path, root).replace(os.sep, "/")
                folder = folder_of(rel)
                if folder not in LIBRARY:
                    problems.append(f"{rel}:1: folder {folder} belongs to no layer (add it to core/CMakeLists.txt and here)")
                    continue
                lib = LIBRARY[folder]
                ok = allowed(lib)
                with open(path, encoding="utf-8", errors="replace") as fh:
                    lines = fh.readlines()
                if len(lines) > MAX_LINES and f.endswith((".cpp", ".h")):
                    problems.append(f"{rel}:{len(lines)}: {len(lines)} lines, more than {MAX_LINES}")
                for n, line in enumerate(lines, 1):
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    target = m.group(1)
                    tlib = LIBRARY.get(target)
                    if tlib is None:
                        problems.append(f"{rel}:{n}: includes {target}/, which belongs to no layer")
                    elif tlib not in ok:
                        problems.append(f"{rel}:{n}: {folder} ({lib}) includes {target}/ ({tlib}), "
                                        f"a layer it does not link")
    return problems


def self_test():
    def tree(files):
        d = tempfile.mkdtemp(prefix="qs-layers-")
        for rel, text in files.items():
            p = os.path.join(d, rel)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "w") as fh:
                fh.write(text)
        return d
    good = tree({"core/kernels/a.h": '#include "core/numeric/metrics.h"\n#include "core/ir/tensor.h"\n',
                 "core/export/b.cpp": '#include "core/analysis/results.h"\n#include "core/onnx/loader.h"\n',
                 "ui/c.cpp": '#include "core/export/report.h"\n'})
    upward = tree({"core/kernels/qconv.h": '#include "core/analysis/metrics.h"\n'})
    sideways = tree({"core/io/x.cpp": '#include "core/onnx/loader.h"\n'})
    long_file = tree({"core/ir/big.cpp": "int x;\n" * (MAX_LINES + 1)})
    failures = []
    if check(good):
        failures.append(f"a correct tree was refused: {check(good)}")
    for name, d in (("upward include", upward), ("include of a sibling library", sideways), ("long file", long_file)):
        if not check(d):
            failures.append(f"a tree with an {name} was accepted")
    for f in failures:
        print("self-test: " + f)
    print("self-test: " + ("failed" if failures else "an upward include, a sibling include and an 801-line file are refused"))
    return 1 if failures else 0


def main():
    if len(sys.argv) == 2 and sys.argv[1] == "--self-test":
        return self_test()
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    problems = check(sys.argv[1])
    for p in problems:
        print(p)
    print(f"layers: {len(problems)} violation(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
