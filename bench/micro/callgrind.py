"""Instruction count of one command under valgrind's callgrind (shared by the micro benchmarks in this folder)."""

from __future__ import annotations

import os
import re
import subprocess
import tempfile


def instructions(argv: list[str], env: dict[str, str] | None = None) -> int:
    """Total instructions callgrind collected while running `argv` (raises with valgrind's stderr if none)."""
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "cg.out")
        p = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", *argv], text=True,
                           capture_output=True, check=True, env=env)
        m = re.search(r"Collected : (\d+)", p.stderr)
        if m is None:
            raise RuntimeError(p.stderr[-2000:])
        return int(m.group(1))
