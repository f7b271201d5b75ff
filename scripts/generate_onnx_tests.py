"""Generates ONNX's backend node tests with Debian's python3-onnx (numpy 1.24 removed the
aliases that onnx 1.12's generators still use, so they are restored first)."""
import runpy
import sys
import warnings

import numpy as np

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    for alias, value in (("float", float), ("int", int), ("bool", bool), ("object", object), ("complex", complex)):
        if not hasattr(np, alias):
            setattr(np, alias, value)

sys.argv = ["onnx.backend.test.cmd_tools", "generate-data", "-o", sys.argv[1]]
runpy.run_module("onnx.backend.test.cmd_tools", run_name="__main__")
