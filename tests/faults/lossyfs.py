"""A filesystem that loses every write not yet synced when its power is cut.

A FUSE passthrough over a backing directory. Data written to a file stays in this process's
memory until the file is fsync'd (or fdatasync'd); only then does it reach the backing
directory. Killing this process with SIGKILL is a power loss: every unsynced write is gone,
exactly what a machine loses with its page cache. Mount it again over the same backing
directory and the process that used it (a log server) restarts on what had been synced.

Metadata (create, rename, unlink, mkdir) takes effect at once, as on a journaling
filesystem that commits metadata in order before data (ext4's data=ordered is close);
only file contents can be lost. That is the failure RocksDB's own sync discipline is meant
to survive, and the one an acknowledged write must survive.

Run: python -m tests.faults.lossyfs BACKING MOUNTPOINT   (in the foreground; SIGKILL = power loss)"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import mfusepy as fuse


class LossyFS(fuse.Operations):  # type: ignore[misc]
    def __init__(self, backing: str) -> None:
        self.root = os.path.realpath(backing)
        # Files with writes not yet synced: their whole current content, as the writers see it.
        self.dirty: dict[str, bytearray] = {}
        self._mu = threading.RLock()

    def _p(self, path: str) -> str:
        return os.path.join(self.root, path.lstrip("/"))

    def _image(self, path: str) -> bytearray:
        img = self.dirty.get(path)
        if img is None:
            with open(self._p(path), "rb") as f:
                img = self.dirty[path] = bytearray(f.read())
        return img

    # ------------------------------------------------------------ metadata: at once
    def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
        with self._mu:
            try:
                st = os.lstat(self._p(path))
            except OSError as e:
                raise fuse.FuseOSError(e.errno) from None
            d = {k: getattr(st, k) for k in ("st_atime", "st_ctime", "st_gid", "st_mode", "st_mtime",
                                             "st_nlink", "st_size", "st_uid")}
            if path in self.dirty:
                d["st_size"] = len(self.dirty[path])
            return d

    def readdir(self, path: str, fh: int) -> list[str]:
        return [".", ".."] + os.listdir(self._p(path))

    def access(self, path: str, amode: int) -> int:
        if not os.access(self._p(path), amode):
            raise fuse.FuseOSError(errno.EACCES)
        return 0

    def chmod(self, path: str, mode: int) -> int:
        os.chmod(self._p(path), mode)
        return 0

    def chown(self, path: str, uid: int, gid: int) -> int:
        os.chown(self._p(path), uid, gid)
        return 0

    def utimens(self, path: str, times: Any = None) -> int:
        return 0

    def mkdir(self, path: str, mode: int) -> int:
        os.mkdir(self._p(path), mode)
        return 0

    def rmdir(self, path: str) -> int:
        os.rmdir(self._p(path))
        return 0

    def statfs(self, path: str) -> dict[str, Any]:
        st = os.statvfs(self._p(path))
        return {k: getattr(st, k) for k in ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail",
                                            "f_ffree", "f_files", "f_flag", "f_frsize", "f_namemax")}

    def create(self, path: str, mode: int, fi: Any = None) -> int:
        with self._mu:
            fd = os.open(self._p(path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
            os.close(fd)
            self.dirty[path] = bytearray()
        return 0

    def open(self, path: str, flags: int) -> int:
        with self._mu:
            if not os.path.exists(self._p(path)):
                raise fuse.FuseOSError(errno.ENOENT)
            if flags & os.O_TRUNC:
                self.dirty[path] = bytearray()
        return 0

    def unlink(self, path: str) -> int:
        with self._mu:
            os.unlink(self._p(path))
            self.dirty.pop(path, None)
        return 0

    def rename(self, old: str, new: str) -> int:
        with self._mu:
            os.rename(self._p(old), self._p(new))
            self.dirty.pop(new, None)
            if old in self.dirty:
                self.dirty[new] = self.dirty.pop(old)
        return 0

    def link(self, target: str, source: str) -> int:
        with self._mu:
            self._sync(source)  # a hard link shares the content: keep it simple and durable
            os.link(self._p(source), self._p(target))
        return 0

    # ------------------------------------------------------------ data: lost unless synced
    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        with self._mu:
            if path in self.dirty:
                return bytes(self.dirty[path][offset:offset + size])
            with open(self._p(path), "rb") as f:
                f.seek(offset)
                return f.read(size)

    def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
        with self._mu:
            img = self._image(path)
            if offset > len(img):
                img.extend(b"\0" * (offset - len(img)))
            img[offset:offset + len(data)] = data
            return len(data)

    def truncate(self, path: str, length: int, fh: int | None = None) -> int:
        with self._mu:
            img = self._image(path)
            if length < len(img):
                del img[length:]
            else:
                img.extend(b"\0" * (length - len(img)))
        return 0

    def fallocate(self, path: str, mode: int, offset: int, size: int, fh: int) -> int:
        raise fuse.FuseOSError(errno.EOPNOTSUPP)  # callers fall back to plain writes

    def flush(self, path: str, fh: int) -> int:
        return 0  # close() does not make anything durable

    def release(self, path: str, fh: int) -> int:
        return 0  # nor does the last close: the page cache keeps it until a sync or a crash

    def fsync(self, path: str, datasync: int, fh: int) -> int:
        with self._mu:
            self._sync(path)
        return 0

    def fsyncdir(self, path: str, datasync: int, fh: int) -> int:
        return 0  # metadata is durable at once here

    def _sync(self, path: str) -> None:
        img = self.dirty.pop(path, None)
        if img is None:
            return
        with open(self._p(path), "r+b") as f:
            f.write(img)
            f.truncate(len(img))
            f.flush()
            os.fsync(f.fileno())


class Mount:
    """A LossyFS process over `backing`, mounted at `mountpoint`."""

    def __init__(self, backing: Path, mountpoint: Path) -> None:
        self.backing = backing
        self.mountpoint = mountpoint
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 30.0) -> Mount:
        self.backing.mkdir(parents=True, exist_ok=True)
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        log = open(self.backing.parent / f"{self.backing.name}-lossyfs.log", "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.faults.lossyfs", str(self.backing),
                                      str(self.mountpoint)], stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while not os.path.ismount(self.mountpoint):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"lossyfs did not mount {self.mountpoint}")
            time.sleep(0.05)
        return self

    def power_loss(self) -> None:
        """Every write not yet synced is gone: the process holding them is SIGKILLed."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None
        subprocess.run(["fusermount3", "-u", "-z", str(self.mountpoint)], capture_output=True, timeout=30)

    def stop(self) -> None:
        self.power_loss()


def main() -> None:
    backing, mountpoint = sys.argv[1], sys.argv[2]
    os.makedirs(backing, exist_ok=True)
    os.makedirs(mountpoint, exist_ok=True)
    fuse.FUSE(LossyFS(backing), mountpoint, foreground=True, nothreads=True)


if __name__ == "__main__":
    main()
