"""The machine under a benchmark: memory that has never been touched costs more than the code being measured.

On a fresh virtual machine (Firecracker here) the host backs guest memory lazily: the first write to a 4 KiB guest
page costs a host-side fault, about 10 µs, against about 1 µs for a page the guest has used and freed before
(measured by `python -m bench.machine`). Both a new CommitLog page (a fault in the broker's mmap) and a new NATS block
page (page cache filled by write()) pay it, so whichever system a round runs first pays it for both, and the rounds'
ratios scatter by it. `warm_memory` touches and frees anonymous memory once, before the rounds: later page-cache and
heap pages come from memory the host has already backed, as on a machine that has been up for a while.
"""

from __future__ import annotations

import mmap
import os
import time

PAGE = 4096


def warm_memory(gib: float) -> float:
    """Write one byte to every page of `gib` GiB of anonymous memory, then free it; returns the seconds taken."""
    n = int(gib * (1 << 30)) // PAGE * PAGE
    if n <= 0:
        return 0.0
    t0 = time.perf_counter()
    m = mmap.mmap(-1, n)
    try:
        m[::PAGE] = b"\x01" * (n // PAGE)  # one write per page: the kernel (and the host) back each page
    finally:
        m.close()
    return time.perf_counter() - t0


def page_fault_cost(path: str, mib: int = 64) -> float:
    """CPU µs per first write to a page of a new mmap'd file (a CommitLog segment's pattern)."""
    size = mib << 20
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.ftruncate(fd, size)
        m = mmap.mmap(fd, size)
        t0 = time.process_time()
        m[::PAGE] = b"\x01" * (size // PAGE)
        dt = time.process_time() - t0
        m.close()
    finally:
        os.close(fd)
        os.unlink(path)
    return dt / (size // PAGE) * 1e6


if __name__ == "__main__":
    import tempfile

    d = tempfile.mkdtemp(prefix="bench-machine-")
    print(f"new file page, before warming: {page_fault_cost(os.path.join(d, 'a')):.2f} µs CPU per page")
    print(f"warmed 2 GiB of memory in {warm_memory(2):.1f} s")
    print(f"new file page, after warming:  {page_fault_cost(os.path.join(d, 'b')):.2f} µs CPU per page")
    os.rmdir(d)
