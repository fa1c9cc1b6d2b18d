"""PowerFS: a FUSE file system for tests that keeps everything unsynced in memory and can "lose power".

Model (what survives a power loss):
- a file's data (and size) as of its last successful fsync/fdatasync; a file never synced is empty;
- a directory's entries (names -> files/subdirectories) as of its last fsync (an O_DIRECTORY fd fsynced, which
  the kernel sends as FSYNCDIR); a file created, renamed or unlinked is durable only after its directory is synced.
  The root directory itself always exists.
Everything else (writes through write(2), dirty mmap pages, fallocate, truncate, names) lives in the daemon's
memory until synced. Shared writable mmap works: the kernel writes dirty pages back as WRITE requests (at the
latest on fsync) because files are opened without direct_io.

Faults, switched through the control socket: `eio_fsync` (every fsync/fsyncdir fails with EIO, nothing becomes
durable), `enospc` (write, fallocate, create, mkdir fail with ENOSPC). `cut` is the power loss: from then on every
operation fails with EIO (nothing more becomes durable) and the durable image is written to the image file; the
harness then kills the processes using the mount, unmounts it and mounts a new daemon from that image.

Limits: one global lock (throughput is that of a Python daemon, fine for tests); no hard links, symlinks or
xattrs; timestamps are not persisted; a torn write (a part of an unsynced page surviving) is not modelled —
unsynced data is dropped whole, as after a crash of a disk with a volatile cache.

Run `python -m orbitmq.testing.powerfs MOUNTPOINT IMAGE CONTROL_SOCKET` (root, /dev/fuse, fusermount3); tests
use `PowerFS` below.
"""

from __future__ import annotations

import argparse
import errno
import os
import pickle
import socket
import stat
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orbitmq.testing.procs import _die_with_parent

CAPACITY = 8 * 1024 * 1024 * 1024  # what statfs reports: the store's disk-usage checks see a mostly empty disk
BLOCK = 4096


@dataclass(eq=False)
class Node:
    is_dir: bool
    mode: int
    data: bytearray = field(default_factory=bytearray)
    durable: bytes = b""
    entries: dict[str, Node] = field(default_factory=dict)
    durable_entries: dict[str, Node] = field(default_factory=dict)
    mtime_ns: int = field(default_factory=time.time_ns)


def _image_of(node: Node) -> dict[str, Any]:
    if node.is_dir:
        return {"dir": True, "mode": node.mode,
                "entries": {name: _image_of(child) for name, child in node.durable_entries.items()}}
    return {"dir": False, "mode": node.mode, "data": node.durable}


def _node_of(image: dict[str, Any]) -> Node:
    if image["dir"]:
        entries = {name: _node_of(child) for name, child in image["entries"].items()}
        return Node(True, image["mode"], entries=entries, durable_entries=dict(entries))
    return Node(False, image["mode"], data=bytearray(image["data"]), durable=image["data"])


try:  # the daemon needs libfuse3; the harness side (PowerFS) imports this module without it
    from mfusepy import FuseOSError
    from mfusepy import Operations as _Operations
except (ImportError, OSError):  # PowerFS.require() reports it; main() fails at its own import
    FuseOSError = OSError  # type: ignore[assignment,misc]
    _Operations = object  # type: ignore[assignment,misc]


def _fuse_error(code: int) -> Exception:
    return FuseOSError(code)


class PowerOps(_Operations):  # type: ignore[misc,valid-type]
    """The mfusepy operations (path based, one lock)."""

    use_ns = True

    def __init__(self, root: Node, image_path: Path) -> None:
        self.root = root
        self.image_path = image_path
        self._mu = threading.Lock()
        self.handles: dict[int, Node] = {}
        self.next_fh = 1
        self.cut = False
        self.eio_fsync = False
        self.enospc = False
        self.fsyncs = 0

    # -- helpers --
    def _check(self) -> None:
        if self.cut:
            raise _fuse_error(errno.EIO)

    def _lookup(self, path: str) -> Node:
        node = self.root
        for part in path.strip("/").split("/"):
            if not part:
                continue
            if not node.is_dir or part not in node.entries:
                raise _fuse_error(errno.ENOENT)
            node = node.entries[part]
        return node

    def _parent(self, path: str) -> tuple[Node, str]:
        head, _, name = path.rstrip("/").rpartition("/")
        parent = self._lookup(head or "/")
        if not parent.is_dir:
            raise _fuse_error(errno.ENOTDIR)
        return parent, name

    def _node(self, path: str, fh: int | None) -> Node:
        if fh and fh in self.handles:
            return self.handles[fh]
        return self._lookup(path)

    def _handle(self, node: Node) -> int:
        fh = self.next_fh
        self.next_fh += 1
        self.handles[fh] = node
        return fh

    def _used(self) -> int:
        total, stack = 0, [self.root]
        while stack:
            n = stack.pop()
            total += len(n.data)
            stack.extend(n.entries.values())
        return total

    # -- control --
    def control(self, command: str) -> str:
        with self._mu:
            word, _, arg = command.strip().partition(" ")
            if word == "cut":
                self.cut = True
                tmp = self.image_path.with_name(self.image_path.name + ".tmp")
                tmp.write_bytes(pickle.dumps(_image_of(self.root)))
                os.replace(tmp, self.image_path)
                return "ok"
            if word in ("eio_fsync", "enospc"):
                setattr(self, word, arg == "on")
                return "ok"
            if word == "stats":
                return f"fsyncs={self.fsyncs} used={self._used()}"
            return f"error unknown command {word!r}"

    # -- attributes --
    def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
        with self._mu:
            self._check()
            n = self._node(path, fh)
            size = len(n.data) if not n.is_dir else BLOCK
            return {"st_mode": n.mode, "st_nlink": 2 if n.is_dir else 1, "st_size": size,
                    "st_blocks": (size + 511) // 512, "st_blksize": BLOCK, "st_uid": os.getuid(),
                    "st_gid": os.getgid(), "st_mtime": n.mtime_ns, "st_ctime": n.mtime_ns, "st_atime": n.mtime_ns}

    def access(self, path: str, amode: int) -> int:
        with self._mu:
            self._check()
            self._lookup(path)
            return 0

    def chmod(self, path: str, mode: int) -> int:
        with self._mu:
            self._check()
            n = self._lookup(path)
            n.mode = (n.mode & ~0o7777) | (mode & 0o7777)
            return 0

    def chown(self, path: str, uid: int, gid: int) -> int:
        return 0

    def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
        with self._mu:
            self._check()
            self._lookup(path).mtime_ns = times[1] if times else time.time_ns()
            return 0

    def statfs(self, path: str) -> dict[str, int]:
        with self._mu:
            free = max(0, CAPACITY - self._used()) // BLOCK
            return {"f_bsize": BLOCK, "f_frsize": BLOCK, "f_blocks": CAPACITY // BLOCK, "f_bfree": free,
                    "f_bavail": free, "f_files": 1 << 20, "f_ffree": 1 << 20, "f_favail": 1 << 20,
                    "f_namemax": 255}

    # -- directories --
    def mkdir(self, path: str, mode: int) -> int:
        with self._mu:
            self._check()
            if self.enospc:
                raise _fuse_error(errno.ENOSPC)
            parent, name = self._parent(path)
            if name in parent.entries:
                raise _fuse_error(errno.EEXIST)
            parent.entries[name] = Node(True, stat.S_IFDIR | (mode & 0o7777))
            return 0

    def rmdir(self, path: str) -> int:
        with self._mu:
            self._check()
            parent, name = self._parent(path)
            n = parent.entries.get(name)
            if n is None:
                raise _fuse_error(errno.ENOENT)
            if not n.is_dir:
                raise _fuse_error(errno.ENOTDIR)
            if n.entries:
                raise _fuse_error(errno.ENOTEMPTY)
            del parent.entries[name]
            return 0

    def opendir(self, path: str) -> int:
        with self._mu:
            self._check()
            n = self._lookup(path)
            if not n.is_dir:
                raise _fuse_error(errno.ENOTDIR)
            return self._handle(n)

    def readdir(self, path: str, fh: int) -> list[str]:
        with self._mu:
            self._check()
            return [".", "..", *self._node(path, fh).entries]

    def releasedir(self, path: str, fh: int) -> int:
        with self._mu:
            self.handles.pop(fh, None)
            return 0

    def fsyncdir(self, path: str, datasync: int, fh: int) -> int:
        with self._mu:
            self._check()
            if self.eio_fsync:
                raise _fuse_error(errno.EIO)
            n = self._node(path, fh)
            n.durable_entries = dict(n.entries)
            self.fsyncs += 1
            return 0

    # -- names --
    def create(self, path: str, mode: int, fi: Any = None) -> int:
        with self._mu:
            self._check()
            if self.enospc:
                raise _fuse_error(errno.ENOSPC)
            parent, name = self._parent(path)
            n = parent.entries.get(name)
            if n is None:
                n = parent.entries[name] = Node(False, stat.S_IFREG | (mode & 0o7777))
            return self._handle(n)

    def unlink(self, path: str) -> int:
        with self._mu:
            self._check()
            parent, name = self._parent(path)
            if name not in parent.entries:
                raise _fuse_error(errno.ENOENT)
            if parent.entries[name].is_dir:
                raise _fuse_error(errno.EISDIR)
            del parent.entries[name]
            return 0

    def rename(self, old: str, new: str) -> int:
        with self._mu:
            self._check()
            src, old_name = self._parent(old)
            dst, new_name = self._parent(new)
            if old_name not in src.entries:
                raise _fuse_error(errno.ENOENT)
            target = dst.entries.get(new_name)
            if target is not None and target.is_dir and target.entries:
                raise _fuse_error(errno.ENOTEMPTY)
            dst.entries[new_name] = src.entries.pop(old_name)
            return 0

    # -- data --
    def open(self, path: str, flags: int) -> int:
        with self._mu:
            self._check()
            return self._handle(self._lookup(path))

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        with self._mu:
            self._check()
            return bytes(self._node(path, fh).data[offset: offset + size])

    def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
        with self._mu:
            self._check()
            if self.enospc:
                raise _fuse_error(errno.ENOSPC)
            buf = self._node(path, fh).data
            end = offset + len(data)
            if end > len(buf):
                buf.extend(bytes(end - len(buf)))
            buf[offset:end] = data
            return len(data)

    def truncate(self, path: str, length: int, fh: int | None = None) -> int:
        with self._mu:
            self._check()
            buf = self._node(path, fh).data
            if length < len(buf):
                del buf[length:]
            else:
                if self.enospc:
                    raise _fuse_error(errno.ENOSPC)
                buf.extend(bytes(length - len(buf)))
            return 0

    def fallocate(self, path: str, mode: int, offset: int, size: int, fh: int) -> int:
        with self._mu:
            self._check()
            if mode != 0:
                raise _fuse_error(errno.EOPNOTSUPP)
            if self.enospc:
                raise _fuse_error(errno.ENOSPC)
            buf = self._node(path, fh).data
            if offset + size > len(buf):
                buf.extend(bytes(offset + size - len(buf)))
            return 0

    def fsync(self, path: str, datasync: int, fh: int) -> int:
        with self._mu:
            self._check()
            if self.eio_fsync:
                raise _fuse_error(errno.EIO)
            n = self._node(path, fh)
            n.durable = bytes(n.data)
            self.fsyncs += 1
            return 0

    def flush(self, path: str, fh: int) -> int:
        return 0

    def release(self, path: str, fh: int) -> int:
        with self._mu:
            self.handles.pop(fh, None)
            return 0


def _serve_control(ops: PowerOps, sock_path: str) -> None:
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    if os.path.exists(sock_path):
        os.unlink(sock_path)
    srv.bind(sock_path)
    srv.listen(4)

    def loop() -> None:
        while True:
            conn, _ = srv.accept()
            with conn:
                line = conn.makefile("r").readline()
                conn.sendall((ops.control(line) + "\n").encode())

    threading.Thread(target=loop, daemon=True, name="powerfs-control").start()


def main(argv: list[str] | None = None) -> None:
    import mfusepy

    ap = argparse.ArgumentParser(prog="powerfs", description=__doc__.splitlines()[0])
    ap.add_argument("mountpoint")
    ap.add_argument("image", help="durable image: loaded at mount if it exists, written by `cut`")
    ap.add_argument("control", help="Unix socket path for the control commands")
    a = ap.parse_args(argv)
    image = Path(a.image)
    root = _node_of(pickle.loads(image.read_bytes())) if image.exists() else Node(True, stat.S_IFDIR | 0o755)
    ops = PowerOps(root, image)
    _serve_control(ops, a.control)
    mfusepy.FUSE(ops, a.mountpoint, foreground=True, fsname="powerfs")


# ---- harness side --------------------------------------------------------------------------------------
class PowerFS:
    """One mounted PowerFS daemon (a subprocess) plus its durable image; survives `power_loss()` by remounting."""

    def __init__(self, mountpoint: str | os.PathLike[str], workdir: str | os.PathLike[str]) -> None:
        self.mountpoint = Path(mountpoint)
        self.workdir = Path(workdir)
        self.image = self.workdir / "powerfs.image"
        self.sock = str(self.workdir / "powerfs.sock")
        self.log = self.workdir / "powerfs.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.mounts = 0

    @staticmethod
    def require() -> None:
        """AssertionError with the reason when this machine cannot run PowerFS (the tests fail, never skip)."""
        missing = [what for what, ok in (("/dev/fuse", os.path.exists("/dev/fuse")),
                                         ("fusermount3 (apt-get install fuse3)", _which("fusermount3")),
                                         ("root", os.geteuid() == 0)) if not ok]
        try:
            import mfusepy  # noqa: F401
        except Exception as e:  # libfuse missing raises at import
            missing.append(f"mfusepy / libfuse3 ({e})")
        assert not missing, "PowerFS needs: " + ", ".join(missing)

    def mount(self, timeout_s: float = 20.0) -> PowerFS:
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        self.workdir.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "orbitmq.testing.powerfs", str(self.mountpoint),
                                          str(self.image), self.sock], stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True,
                                         preexec_fn=_die_with_parent)
        deadline = time.monotonic() + timeout_s
        while not (os.path.ismount(self.mountpoint) and os.path.exists(self.sock)):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self._stop_daemon()
                raise RuntimeError(f"PowerFS did not mount at {self.mountpoint}: {self.log.read_text()[-2000:]}")
            time.sleep(0.02)
        self.mounts += 1
        return self

    def control(self, command: str, timeout_s: float = 10.0) -> str:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout_s)
            s.connect(self.sock)
            s.sendall(command.encode() + b"\n")
            answer = s.makefile("r").readline().strip()
        if answer.startswith("error"):
            raise RuntimeError(f"PowerFS {command!r}: {answer}")
        return answer

    def cut(self) -> None:
        """The power goes: nothing more becomes durable, every later operation on the mount fails with EIO."""
        self.control("cut")

    def remount(self) -> PowerFS:
        """After `cut` and once the processes using the mount are dead: unmount, mount the durable image."""
        self.unmount()
        return self.mount()

    def unmount(self) -> None:
        """Kill the daemon (its memory is what a power loss takes; the durable image was written by `cut`), then
        detach the mount (lazily: it answers ENOTCONN once the daemon is gone)."""
        self._stop_daemon()
        subprocess.run(["fusermount3", "-u", "-z", str(self.mountpoint)], check=False,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if os.path.exists(self.sock):
            os.unlink(self.sock)

    def _stop_daemon(self) -> None:
        if self.proc is None:
            return
        self.proc.kill()
        self.proc.wait(timeout=10)
        self.proc = None

    def close(self) -> None:
        self.unmount()

    def __enter__(self) -> PowerFS:
        return self.mount()

    def __exit__(self, *exc: object) -> None:
        self.close()


def _which(name: str) -> bool:
    return any(os.access(os.path.join(d, name), os.X_OK) for d in os.environ.get("PATH", "").split(os.pathsep) if d)


if __name__ == "__main__":
    main()
