"""Small filesystem helpers shared by every stage: atomic writes, content hashes, config files."""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import shutil
import socket
import stat
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from archpool.errors import LockError, StateError

TMP_SUFFIX = ".tmp"


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def refuse_symlink(path: str | os.PathLike) -> Path:
    """``path`` itself, refused (``StateError``) when it is a symbolic link: archpool writes only
    files it owns and never follows a link out of the directory it writes into."""
    path = Path(path)
    if path.is_symlink():
        raise StateError(f"{path}: is a symbolic link (to {os.readlink(path)}); archpool does not write through links, remove it")
    return path


def owned_path(root: str | os.PathLike, *parts: str | os.PathLike) -> Path:
    """``root/parts…``, each entry below ``root`` refused (``StateError``) when it is a symbolic link.

    The entries of a directory archpool owns (a pool's ``runs/``, ``report/``, ``stages/``; a run's
    ``ckpt/``, ``milestones/``, ``extend/``) are made by archpool itself, so a link among them was planted:
    following it would write outside the directory. ``root`` itself is the user's path and may be a link;
    an absolute part (a user's path) is taken as it is."""
    path = Path(root)
    for part in parts:
        if Path(part).is_absolute():
            path = Path(part)
            continue
        for name in Path(part).parts:
            path = refuse_symlink(path / name)
    return path


def owned_dir(root: str | os.PathLike, *parts: str | os.PathLike) -> Path:
    """:func:`owned_path`, created level by level (each level checked again once it exists)."""
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    for part in parts:
        for name in Path(part).parts:
            path = refuse_symlink(path / name)
            path.mkdir(exist_ok=True)
            refuse_symlink(path)
    return path


def disk_error(path: str | os.PathLike, e: OSError) -> StateError:
    """A named error for a failed write (disk full, quota, read-only file system) of ``path``."""
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return StateError(
            f"{path}: disk full while writing ({e.strerror or e}); free space and re-run (nothing partial was kept)"
        )
    return StateError(f"{path}: cannot write ({e.strerror or e})")


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; rename it onto ``path`` only if the block succeeds.

    The file gets the permissions an ordinary ``open(path, "w")`` would give (0666 less the umask),
    not ``mkstemp``'s private 0600, so colleagues on a shared filesystem can read results. A ``path``
    that is a symbolic link is refused (the rename would replace the link, never write through it)."""
    path = refuse_symlink(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=TMP_SUFFIX, dir=path.parent)
    os.fchmod(fd, 0o666 & ~_umask())
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        with open(tmp_path, "rb") as f:
            os.fsync(f.fileno())
        os.chmod(tmp_path, 0o666 & ~_umask())  # a writer that replaced the file (safetensors: 0600) gets it back
        refuse_symlink(path)
        os.replace(tmp_path, path)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def _atomic_write(path: str | os.PathLike, write: Callable[[Path], object]) -> None:
    """``write`` into a temporary file beside ``path``, then rename it over ``path``; a failing disk
    is a named error."""
    try:
        with atomic_path(path) as tmp:
            write(tmp)
    except OSError as e:
        raise disk_error(path, e) from None


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    _atomic_write(path, lambda tmp: tmp.write_text(text))


def atomic_write_json(path: str | os.PathLike, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    _atomic_write(path, lambda tmp: tmp.write_bytes(data))


# ---------------------------------------------------------------------------------------------- cache entries
CONTENT_HASH = "content_sha256"


def content_hash(obj: dict[str, Any]) -> str:
    """sha256 of the canonical JSON of ``obj`` (sorted keys, no spaces), its ``content_sha256`` left out."""
    body = {k: v for k, v in obj.items() if k != CONTENT_HASH}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def with_content_hash(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` as JSON will read it back, with its ``content_sha256`` (what :func:`checked_content` verifies)."""
    parsed = json.loads(json.dumps(obj))
    return {**parsed, CONTENT_HASH: content_hash(parsed)}


def checked_content(obj: dict[str, Any], path: str | os.PathLike) -> dict[str, Any] | None:
    """``obj`` without its ``content_sha256`` when that matches its content; else None, with a warning
    naming ``path`` (an entry edited by hand or damaged is recomputed, never served)."""
    stored = obj.get(CONTENT_HASH)
    body = {k: v for k, v in obj.items() if k != CONTENT_HASH}
    if not isinstance(stored, str) or stored != content_hash(body):
        why = "has no content hash" if stored is None else "does not match its content hash (edited or damaged)"
        warnings.warn(f"{path}: cache entry {why}; recomputing it", stacklevel=3)
        return None
    return body


def write_cache_entry(path: str | os.PathLike, obj: dict[str, Any]) -> None:
    """Write a cache entry atomically with its content hash (read it back with :func:`read_cache_entry`)."""
    atomic_write_json(path, with_content_hash(obj))


def read_cache_entry(path: str | os.PathLike, reader: Callable[[Path], Any] | None = None) -> dict[str, Any] | None:
    """The cache entry :func:`write_cache_entry` wrote to ``path``, its content hash checked; None when
    there is none, it is unreadable or not a JSON object, or its hash does not match (then with a warning).
    ``reader``: the bounded JSON reader (default :func:`archpool.safeload.read_json_object`)."""
    from archpool.errors import ConfigError
    from archpool.safeload import read_json_object

    path = Path(path)
    if path.is_symlink() or not path.is_file():
        return None
    try:
        obj = (reader or read_json_object)(path)
    except ConfigError:
        return None
    return checked_content(obj, path) if isinstance(obj, dict) else None


def open_append(path: str | os.PathLike) -> int:
    """A file descriptor appending to ``path`` (created 0666 less the umask); ``O_NOFOLLOW`` refuses a
    ``path`` that is a symbolic link, so an append never lands in the file a link points to."""
    path = Path(path)
    try:
        return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o666)
    except OSError as e:
        if e.errno == errno.ELOOP:
            refuse_symlink(path)
        raise disk_error(path, e) from None


def append_text(path: str | os.PathLike, text: str) -> None:
    """Append ``text`` to ``path`` in one ``write`` (atomic for one line under ``O_APPEND``), never through a link."""
    fd = open_append(path)
    try:
        os.write(fd, text.encode())
    except OSError as e:
        raise disk_error(path, e) from None
    finally:
        os.close(fd)


def open_append_text(path: str | os.PathLike, buffering: int = -1):
    """A text file object appending to ``path`` (see ``open_append``)."""
    return os.fdopen(open_append(path), "a", buffering=buffering)


def remove_stale_temporaries(directory: str | Path, older_than_s: float = 3600.0) -> list[Path]:
    """Delete the temporary files ``atomic_path`` left in ``directory`` when its process was killed
    (older than ``older_than_s``, so a live writer's file is never taken); return what was removed."""
    directory = Path(directory)
    removed: list[Path] = []
    if not directory.is_dir():
        return removed
    now = time.time()
    for p in directory.iterdir():
        if p.name.startswith(".") and p.name.endswith(TMP_SUFFIX) and p.is_file() and not p.is_symlink():
            try:
                if now - p.stat().st_mtime > older_than_s:
                    p.unlink()
                    removed.append(p)
            except OSError:
                continue
    return removed


@contextmanager
def fresh_directory(
    target: str | os.PathLike,
    *,
    replace: bool = False,
    replaceable: Callable[[Path], str | None] | None = None,
    flag: str = "--replace",
) -> Iterator[Path]:
    """Yield an empty directory beside ``target``; when the block succeeds it becomes ``target`` whole
    (:func:`replace_directory`: nothing of an older ``target`` is left), else it is removed.

    ``target`` may be absent or an empty directory. A non-empty one is a ``StateError`` unless ``replace``
    (the command's ``flag``), and even then when ``replaceable(target)`` gives a reason it is not this
    command's own output: a command replaces only what it wrote. A ``target`` that is a symbolic link or
    a file is refused."""
    target = refuse_symlink(Path(target))
    if target.exists() and not target.is_dir():
        raise StateError(f"{target}: exists and is not a directory; choose a new directory")
    if target.is_dir() and any(target.iterdir()):
        if not replace:
            raise StateError(
                f"{target}: the output directory is not empty; pass {flag} to replace it whole, or choose a new directory"
            )
        why = replaceable(target) if replaceable is not None else None
        if why:
            raise StateError(f"{target}: {why}; {flag} replaces only this command's own output, choose a new directory")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=TMP_SUFFIX, dir=target.parent))
    os.chmod(tmp, 0o777 & ~_umask())
    try:
        yield tmp
        refuse_symlink(target)
        replace_directory(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def replace_directory(tmp: str | os.PathLike, target: str | os.PathLike) -> None:
    """Rename the finished directory ``tmp`` onto ``target``. A directory already there is renamed
    aside first and deleted after, so a complete copy is missing for two renames at most."""
    tmp, target = Path(tmp), Path(target)
    if not target.exists():
        os.replace(tmp, target)
        return
    old = target.parent / f".old_{target.name}.{os.getpid()}"
    os.replace(target, old)
    os.replace(tmp, target)
    shutil.rmtree(old, ignore_errors=True)


def same_or_nested(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """True when ``a`` and ``b`` are the same directory or one lies inside the other (links resolved)."""
    ra, rb = Path(a).resolve(), Path(b).resolve()
    return ra == rb or ra.is_relative_to(rb) or rb.is_relative_to(ra)


def require_distinct(src: str | os.PathLike, dst: str | os.PathLike, what: str = "destination") -> None:
    """``StateError`` when writing ``dst`` could overwrite ``src`` (same directory, or one inside the other)."""
    if same_or_nested(src, dst):
        raise StateError(f"{dst}: the {what} is, contains or lies inside the source {src}; choose a separate directory")


def copy_regular_file(src: str | os.PathLike, dst: str | os.PathLike) -> None:
    """Copy ``src`` to ``dst`` atomically; ``StateError`` when ``src`` is a symbolic link or not a regular
    file (``O_NOFOLLOW``: a link to a file elsewhere is never copied into a directory archpool writes)."""
    src = Path(src)
    try:
        fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as e:
        if e.errno == errno.ELOOP:
            refuse_symlink(src)
        raise StateError(f"{src}: cannot read ({e.strerror or e})") from None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise StateError(f"{src}: not a regular file; refusing to copy it")
        data = f.read()
    atomic_write_bytes(dst, data)


LOCK_NAME = ".archpool.lock"


@contextmanager
def directory_lock(directory: str | os.PathLike, what: str = "directory") -> Iterator[Path]:
    """Hold an exclusive ``flock`` on ``directory/.archpool.lock`` for the block; a second writer gets
    ``LockError`` naming the process (pid, host, command) that holds it. The kernel releases the
    lock when its process dies, so a killed writer never leaves the directory locked."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = refuse_symlink(directory / LOCK_NAME)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o666 & ~_umask())
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip() or "another process"
            raise LockError(
                f"{directory}: this {what} is in use by {holder}; wait for it to finish or use another directory"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()} ({' '.join(sys.argv[:3])[:200]})\n".encode(), 0)
        yield path
    finally:
        os.close(fd)


_VERIFIED: dict[tuple, str] = {}


def sha256_cached(path: str | os.PathLike) -> str:
    """``sha256_file`` of ``path``, remembered in this process by (device, inode, size, mtime): a file
    is hashed once until its bytes (size or modification time) change."""
    st = os.stat(path)
    key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    if key not in _VERIFIED:
        _VERIFIED[key] = sha256_file(path)
    return _VERIFIED[key]


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def sha256_json(obj: Any) -> str:
    """Hash of a JSON-serialisable object, independent of key order."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def read_config_file(path: str | os.PathLike) -> Any:
    """The JSON (``.json``) or YAML (any other name; YAML reads JSON too) document in ``path``; a missing,
    unreadable, non-regular, oversized, non-UTF-8 or malformed file is a ``ConfigError`` naming the file.
    Parsing is bounded (:mod:`archpool.safeload`): no alias bombs, no deep nesting, no duplicate keys."""
    from archpool.safeload import load_json, load_yaml, read_text_bounded

    path = Path(path)
    text = read_text_bounded(path)
    return load_json(text, str(path)) if path.suffix == ".json" else load_yaml(text, str(path))
