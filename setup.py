"""Build wiring for the optional C extension (everything else is in pyproject.toml).

`orbitmq.base._speedups` holds native twins of the per-message hot paths; it is optional: without a compiler or
Python headers the install still succeeds and the pure-Python code runs (optional=True, and every import of it
falls back). Set ORBITMQ_NO_EXT=1 to skip building it.
"""

import os

from setuptools import Extension, setup

ext_modules = []
if os.environ.get("ORBITMQ_NO_EXT") != "1":
    ext_modules.append(
        Extension(
            "orbitmq.base._speedups",
            sources=["orbitmq/base/_speedups.c", "orbitmq/base/_dedupmap.c"],
            depends=["orbitmq/base/_dedupmap.h"],
            extra_compile_args=["-O2", "-std=c11", "-Wall", "-Wno-missing-braces"],
            optional=True,
        )
    )

setup(ext_modules=ext_modules)
