#!/usr/bin/python3
"""Checks that every flag and option docs/export.md's table "Which file serves which runtime" names
is one that docs/tool-flags.json records as verified, in that tool's source, for that tool.

usage: check_tool_flags.py EXPORT_MD TOOL_FLAGS_JSON      (exit 0: all known; 1: unknown names listed)
       check_tool_flags.py --self-test EXPORT_MD TOOL_FLAGS_JSON   (a made-up flag must be caught)

A row's commands are the backticked spans of its last column. The tool of a span is its first word
(trtexec, polygraphy, or a PPQ script path); ORT's options are the `trt_...` names. Flags are the
`--name` tokens of a command (`--name=value` counts as `--name`); Polygraphy's subcommands count too.
"""
import json
import re
import sys

TOOLS = {"trtexec": "trtexec", "polygraphy": "Polygraphy", "ppq/utils/write_qparams_onnx2trt.py": "PPQ"}


def table_rows(md):
    text = open(md).read()
    start = text.index("## Which file serves which runtime")
    end = text.index("\n## ", start + 1)
    return [l for l in text[start:end].splitlines() if l.startswith("|") and not l.startswith("|---")][1:]


def used_names(rows):
    used = []  # (tool, name, row)
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        for m in re.finditer(r"`([^`]+)`", cells[-1]):
            span, before = m.group(1), cells[-1][max(0, m.start() - 24):m.start()]
            words = span.split()
            tool = TOOLS.get(words[0]) if words else None
            if tool:
                for w in words[1:]:
                    if w.startswith("--"):
                        used.append((tool, w.split("=")[0], row))
                if tool == "Polygraphy" and len(words) > 1 and not words[1].startswith("-"):
                    used.append((tool, f"polygraphy {words[1]}", row))
            elif span.startswith("--"):  # a lone flag: of the tool named just before it, else of the row's
                if "Polygraphy" in before or ("Polygraphy" in cells[-1] and "trtexec" not in cells[-1]):
                    used.append(("Polygraphy", span.split("=")[0], row))
                elif "trtexec" in cells[-1] or "trtexec" in before:
                    used.append(("trtexec", span.split("=")[0], row))
            for opt in re.findall(r"\b(trt_[a-z0-9_]+)", span):
                used.append(("ONNX Runtime TensorRT EP", opt, row))
    return used


def known_names(flags_json):
    known = {}
    for e in json.load(open(flags_json))["verified"]:
        for name in re.split(r"\s*/\s*", e["name"]):
            name = name.split(" (")[0].strip()
            known.setdefault(e["tool"], set()).add(name)
            if name.startswith("polygraphy "):
                known[e["tool"]].add(name)
    return known


def check(md, flags_json, extra=()):
    known = known_names(flags_json)
    used = used_names(table_rows(md)) + list(extra)
    unknown = [(t, n) for t, n, _ in used if n not in known.get(t, set())]
    return used, unknown


def main():
    args = sys.argv[1:]
    self_test = args and args[0] == "--self-test"
    if self_test:
        args = args[1:]
    md, flags_json = args
    if self_test:
        _, unknown = check(md, flags_json, [("trtexec", "--int8-calibrate-everything", "made up")])
        if ("trtexec", "--int8-calibrate-everything") not in unknown:
            print("self-test: a made-up trtexec flag was not caught", file=sys.stderr)
            return 1
        print("self-test: a made-up flag is caught")
        return 0
    used, unknown = check(md, flags_json)
    if len(used) < 10:
        print(f"{md}: only {len(used)} names found in the runtime table: the parser no longer matches it", file=sys.stderr)
        return 1
    for tool, name in unknown:
        print(f"{md}: '{name}' ({tool}) is not in {flags_json}'s verified names", file=sys.stderr)
    if not unknown:
        print(f"{len(used)} names in the runtime table, all verified: " +
              ", ".join(sorted({f'{t}:{n}' for t, n, _ in used})))
    return 1 if unknown else 0


if __name__ == "__main__":
    sys.exit(main())
