#!/usr/bin/python3
"""Validates JSON files against a JSON Schema (draft 2020-12) with python3-jsonschema.
usage: validate_json.py SCHEMA FILE...   exit 0 when every file is valid, 1 (and the first errors of
each file on stderr) when one is not, 2 when the schema itself is not a valid schema."""
import json
import sys

import jsonschema


def main():
    schema = json.load(open(sys.argv[1]))
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as e:
        print(f"{sys.argv[1]}: not a valid schema: {e.message}", file=sys.stderr)
        return 2
    validator = jsonschema.Draft202012Validator(schema)
    bad = 0
    for path in sys.argv[2:]:
        errors = sorted(validator.iter_errors(json.load(open(path))), key=lambda e: list(e.path))
        for e in errors[:5]:
            print(f"{path}: {e.json_path}: {e.message[:300]}", file=sys.stderr)
        bad += bool(errors)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
