"""The store's only door to the file system: the Disk/Backing protocols and the real mmap implementation.

A Backing is one fixed-size segment file exposing a writable buffer (mmap for MmapDisk, bytearray for SimDisk).
Writers write straight into `buf` then call `mark_written(start, end)` (SimDisk logs it for crash modelling);
`flush(start, end)` makes that range durable (blocking: run it in a thread executor from asyncio when
`Disk.flush_in_thread` is true). Nothing here knows record formats.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import mmap
import os
import shutil
from typing import Any, Protocol

from orbitmq.base.fsio import atomic_write, fsync_dir, makedirs_durable, read_with_backup
from orbitmq.store.errors import StoreInUseError

PAGE_SIZE = mmap.PAGESIZE


class Backing(Protocol):
    path: str
    size: int
    buf: memoryview  # writable, len == size

    def mark_written(self, start: int, end: int) -> None: ...

    def write(self, position: int, data: bytes | memoryview) -> None: ...

    def flush(self, start: int, end: int) -> None: ...

    def data_end(self, position: int) -> int: ...  # bytes from here on are known to read as zero (a hole)

    def close(self) -> None: ...


class FileLock(Protocol):
    def release(self) -> None: ...


class Disk(Protocol):
    flush_in_thread: bool

    def create(self, path: str, size: int) -> Backing: ...  # new zero-filled file (fails if it exists)

    def open(self, path: str, size: int) -> Backing: ...  # existing file, grown (zero) to size if shorter

    def exists(self, path: str) -> bool: ...

    def file_size(self, path: str) -> int: ...

    def delete(self, path: str) -> None: ...  # missing file is fine

    def list_files(self, directory: str) -> list[str]: ...  # sorted plain-file names ([] if no dir)

    def list_dirs(self, directory: str) -> list[str]: ...  # sorted sub-directory names

    def makedirs(self, directory: str) -> None: ...

    def remove_tree(self, directory: str) -> None: ...

    def mtime_ms(self, path: str) -> int: ...

    def read_small(self, path: str) -> bytes | None: ...  # whole file, None if missing

    def write_small_atomic(self, path: str, data: bytes) -> None: ...  # tmp + fsync + rename (+ .bak)

    def read_small_with_backup(self, path: str) -> list[bytes]: ...  # file then its .bak, newest first

    def touch(self, path: str) -> None: ...  # create empty file durably (abort marker)

    def lock(self, path: str) -> FileLock: ...  # exclusive; StoreError if held elsewhere

    def usage_ratio(self, directory: str) -> float: ...  # used / total of the file system, 0..1


def _allocate(fd: int, size: int) -> None:
    """Reserve `size` bytes of disk for a new segment before it is mapped: a store into a sparse mapping whose page
    the file system cannot allocate (a full disk) kills the process with SIGBUS, an OSError here is refused
    cleanly. posix_fallocate; where the file system does not support it (EOPNOTSUPP/EINVAL), zeros are written."""
    try:
        os.posix_fallocate(fd, 0, size)
        return
    except OSError as e:
        if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
            raise
    chunk = bytes(min(size, 1 << 20))
    pos = 0
    while pos < size:
        pos += os.pwrite(fd, chunk[: size - pos], pos)


_MADV_POPULATE_WRITE = 23  # Linux 5.14+
_libc_madvise: Any = None  # libc's madvise, False when unavailable


def _madvise_fn() -> Any:
    """libc's madvise through ctypes (which releases the interpreter lock during the call), or None."""
    global _libc_madvise
    if _libc_madvise is None:
        try:
            fn = ctypes.CDLL(None, use_errno=True).madvise
            fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
            fn.restype = ctypes.c_int
            _libc_madvise = fn
        except (OSError, AttributeError):
            _libc_madvise = False
    return _libc_madvise or None


class MmapBacking:
    """A pre-sized file mapped read/write; flush is fdatasync of the file (releases the GIL, unlike mmap.flush).
    A new file is allocated (fallocate) before it is mapped, so a full disk is an OSError, never a SIGBUS."""

    __slots__ = ("path", "size", "buf", "_fd", "_mm", "_closed")

    def __init__(self, path: str, size: int, create: bool) -> None:
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        fd = os.open(path, flags, 0o644)
        try:
            if create:
                _allocate(fd, size)
                # the allocated size is file metadata: durable only by an fsync of the file (the directory fsync that
                # follows covers the name); else a power loss leaves a named, empty segment that fails the next start
                os.fsync(fd)
            elif os.fstat(fd).st_size < size:
                os.ftruncate(fd, size)
            mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            os.close(fd)
            if create:  # a half-allocated new file must not be taken for a segment at the next start
                with contextlib.suppress(OSError):
                    os.unlink(path)
            raise
        self.path = path
        self.size = size
        self._fd = fd
        self._mm = mm
        self.buf = memoryview(mm)
        self._closed = False

    def mark_written(self, start: int, end: int) -> None:
        pass

    def prefault(self, length: int) -> None:
        """Set up the mapping's first `length` bytes for writing now (MADV_POPULATE_WRITE), without the interpreter
        lock. The first store into a new mapping costs 3-50 ms of kernel work on this project's VMs (once per
        mapping); the allocation thread pays it instead of the send that rolls into the segment. A no-op where
        madvise or the advice is not available. The pages are the file's zeros, so nothing changes on disk."""
        fn = _madvise_fn()
        if fn is None or self._closed:
            return
        anchor = ctypes.c_char.from_buffer(self._mm)  # a buffer export, released right after taking the address
        addr = ctypes.addressof(anchor)
        del anchor
        fn(addr, min(length, self.size), _MADV_POPULATE_WRITE)  # errors (EINVAL on old kernels) are ignored

    def write(self, position: int, data: bytes | memoryview) -> None:
        self._mm[position : position + len(data)] = data

    def data_end(self, position: int) -> int:
        """End of the last data extent at or after `position` (SEEK_DATA/SEEK_HOLE; dirty page-cache pages count as
        data), or the file size when the file system can't tell. Reading holes through the mapping would allocate
        zero pages: for a 1 GiB segment that costs seconds at recovery."""
        end = position
        pos = position
        try:
            while pos < self.size:
                try:
                    data = os.lseek(self._fd, pos, os.SEEK_DATA)
                except OSError as e:
                    if e.errno == errno.ENXIO:  # no data after pos
                        break
                    raise
                pos = os.lseek(self._fd, data, os.SEEK_HOLE)
                end = pos
        except (OSError, AttributeError):
            return self.size
        return min(end, self.size)

    def flush(self, start: int, end: int) -> None:
        if self._closed or end <= start:
            return
        # fdatasync on the file, not mmap.flush: CPython 3.11's mmap.flush holds the GIL through msync (the event
        # loop would freeze for the whole disk write). On Linux a MAP_SHARED mapping's stores dirty the file's page
        # cache, so fdatasync makes them durable — every dirty page of the segment, a superset of [start, end).
        try:
            os.fdatasync(self._fd)
        except OSError:
            if not self._closed:  # closed (deleted/truncated) while a worker thread was flushing: nothing to do
                raise

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.buf.release()
        try:
            self._mm.close()
        except BufferError:
            # A reader still holds a slice (a pull response being written): the mapping is released
            # when that view is garbage-collected.
            pass
        os.close(self._fd)


def tracks_writes(backing: Backing) -> bool:
    """False when mark_written does nothing (a mapped file: the page cache is the file), so a per-entry hot path
    may skip the call; True for any other backing (SimDisk logs writes for its crash model)."""
    return type(backing) is not MmapBacking


class _FcntlLock:
    __slots__ = ("_fd",)

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def release(self) -> None:
        if self._fd >= 0:
            with contextlib.suppress(OSError):
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = -1


class MmapDisk:
    """The real disk: mmap'd segment files, atomic small files, fcntl locks."""

    flush_in_thread = True

    def create(self, path: str, size: int) -> MmapBacking:
        directory = os.path.dirname(path)
        self.makedirs(directory)
        backing = MmapBacking(path, size, create=True)
        fsync_dir(directory)  # the new name is durable before anything written into the file is acknowledged
        return backing

    def open(self, path: str, size: int) -> MmapBacking:
        return MmapBacking(path, size, create=False)

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def file_size(self, path: str) -> int:
        return os.path.getsize(path)

    def delete(self, path: str) -> None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            return
        fsync_dir(os.path.dirname(path))  # the removal is durable (a truncated tail must not come back)

    def list_files(self, directory: str) -> list[str]:
        try:
            return sorted(e.name for e in os.scandir(directory) if e.is_file())
        except FileNotFoundError:
            return []

    def list_dirs(self, directory: str) -> list[str]:
        try:
            return sorted(e.name for e in os.scandir(directory) if e.is_dir())
        except FileNotFoundError:
            return []

    def makedirs(self, directory: str) -> None:
        makedirs_durable(directory)

    def remove_tree(self, directory: str) -> None:
        shutil.rmtree(directory, ignore_errors=True)

    def mtime_ms(self, path: str) -> int:
        return os.stat(path).st_mtime_ns // 1_000_000

    def read_small(self, path: str) -> bytes | None:
        try:
            with open(path, "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def write_small_atomic(self, path: str, data: bytes) -> None:
        atomic_write(path, data)

    def read_small_with_backup(self, path: str) -> list[bytes]:
        return read_with_backup(path)

    def touch(self, path: str) -> None:
        self.makedirs(os.path.dirname(path))
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        fsync_dir(os.path.dirname(path))

    def lock(self, path: str) -> _FcntlLock:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # per open file: also catches a 2nd store in-process
        except OSError as e:
            os.close(fd)
            raise StoreInUseError(f"store is already in use by another process (lock file {path})") from e
        if os.fstat(fd).st_size == 0:
            os.write(fd, b"lock")
        return _FcntlLock(fd)

    def usage_ratio(self, directory: str) -> float:
        try:
            u = shutil.disk_usage(directory)
        except OSError:
            return 0.0
        return (u.total - u.free) / u.total if u.total else 0.0
