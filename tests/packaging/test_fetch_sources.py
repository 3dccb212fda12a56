"""packaging/artifact/fetch-sources against a Debian-style archive of its own: a source index
signed with a throwaway key and served on loopback. Pinned files are checked by their sha256; a
pinned file the archive no longer has is replaced by the newest revision of its package that
the mirror serves, checked by apt against the signed index, and the pins to bump are printed."""

from __future__ import annotations

import email.utils
import hashlib
import http.server
import os
import subprocess
import threading
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

from tests.packaging.test_artifact_pins import REPO

pytestmark = pytest.mark.root  # apt-get fetches as root (its sandbox user is set to root)

FETCH = REPO / "packaging" / "artifact" / "fetch-sources"


@dataclass(frozen=True)
class SourcePackage:
    """One revision of a source package: its files by name, under pool/main/<letter>/<name>."""

    name: str
    version: str
    files: dict[str, bytes]

    @property
    def directory(self) -> str:
        letter = self.name[:4] if self.name.startswith("lib") else self.name[0]
        return f"pool/main/{letter}/{self.name}"

    def stanza(self) -> str:
        def listing(digest: str) -> str:
            return "".join(
                f" {hashlib.new(digest, data).hexdigest()} {len(data)} {name}\n"
                for name, data in self.files.items()
            )

        return (
            f"Package: {self.name}\nBinary: {self.name}\nVersion: {self.version}\n"
            "Maintainer: Test <test@invalid>\nArchitecture: any\nFormat: 3.0 (quilt)\n"
            f"Directory: {self.directory}\nFiles:\n{listing('md5')}"
            f"Checksums-Sha256:\n{listing('sha256')}\n"
        )


def revision(name: str, upstream: str, debian: str) -> SourcePackage:
    version = f"{upstream}-{debian}"
    return SourcePackage(
        name,
        version,
        {
            f"{name}_{version}.dsc": f"Format: 3.0 (quilt)\nSource: {name}\n".encode(),
            f"{name}_{upstream}.orig.tar.gz": os.urandom(2048),
            f"{name}_{version}.debian.tar.xz": os.urandom(512),
        },
    )


class Archive:
    """A trixie source suite in `root`, signed in `gnupg_home`, served at `url`."""

    def __init__(self, root: Path, gnupg_home: Path, url: str) -> None:
        self.root, self.gnupg_home, self.url = root, gnupg_home, url
        self.keyring = gnupg_home / "archive-keyring.gpg"

    def gpg(self, *args: str) -> bytes:
        return subprocess.run(
            ["gpg", "--batch", "--yes", "--quiet", "--pinentry-mode", "loopback",
             "--passphrase", "", *args],
            env={**os.environ, "GNUPGHOME": str(self.gnupg_home)},
            check=True, capture_output=True,
        ).stdout  # fmt: skip

    def publish(self, indexed: list[SourcePackage], served: list[SourcePackage]) -> None:
        """`indexed` in the signed index; the files of `served` in the pool."""
        for package in served:
            pool = self.root / package.directory
            pool.mkdir(parents=True, exist_ok=True)
            for name, data in package.files.items():
                (pool / name).write_bytes(data)
        suite = self.root / "dists" / "trixie"
        (suite / "main" / "source").mkdir(parents=True, exist_ok=True)
        sources = "".join(package.stanza() for package in indexed).encode()
        (suite / "main" / "source" / "Sources").write_bytes(sources)
        release = suite / "Release"
        release.write_text(
            "Origin: Test\nSuite: trixie\nCodename: trixie\n"
            f"Date: {email.utils.formatdate(usegmt=True)}\nArchitectures: amd64\n"
            "Components: main\nSHA256:\n"
            f" {hashlib.sha256(sources).hexdigest()} {len(sources)} main/source/Sources\n"
        )
        self.gpg("--clearsign", "-o", str(suite / "InRelease"), str(release))

    def pin(self, package: SourcePackage, *names: str) -> str:
        return "".join(
            f"{hashlib.sha256(package.files[name]).hexdigest()} {package.directory}/{name}\n"
            for name in names
        )


@pytest.fixture
def archive(tmp_path: Path) -> Iterator[Archive]:
    root, gnupg_home = tmp_path / "archive", tmp_path / "gnupg"
    root.mkdir()
    gnupg_home.mkdir(mode=0o700)
    handler = partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *_: None  # type: ignore[attr-defined]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    archive = Archive(root, gnupg_home, f"http://127.0.0.1:{server.server_address[1]}")
    try:
        archive.gpg("--quick-gen-key", "envd test archive <test@invalid>", "ed25519", "sign",
                    "never")  # fmt: skip
        archive.keyring.write_bytes(archive.gpg("--export"))
        yield archive
    finally:
        server.shutdown()
        thread.join()
        server.server_close()
        subprocess.run(["gpgconf", "--kill", "gpg-agent"], check=False,
                       env={**os.environ, "GNUPGHOME": str(gnupg_home)})  # fmt: skip


def fetch(archive: Archive, pins: str, dest: Path) -> subprocess.CompletedProcess[str]:
    pins_file = dest.parent / "sources.txt"
    pins_file.write_text("# pins\n" + pins)
    dest.mkdir()
    return subprocess.run(
        [str(FETCH), str(pins_file), str(dest), archive.url],
        env={**os.environ, "ENVD_ARCHIVE_KEYRING": str(archive.keyring)},
        capture_output=True, text=True, timeout=120, check=False,  # the status is the subject
    )  # fmt: skip


def test_pinned_files_are_fetched_and_checked(archive: Archive, tmp_path: Path) -> None:
    zlib = revision("zlib", "1.3", "1")
    archive.publish([zlib], [zlib])
    result = fetch(archive, archive.pin(zlib, "zlib_1.3.orig.tar.gz"), tmp_path / "out")
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["zlib_1.3.orig.tar.gz"]
    assert "WARNING" not in result.stderr


def test_a_pinned_file_with_other_contents_stops_the_build(
    archive: Archive, tmp_path: Path
) -> None:
    zlib = revision("zlib", "1.3", "1")
    archive.publish([zlib], [zlib])
    pins = archive.pin(zlib, "zlib_1.3.orig.tar.gz").replace(
        hashlib.sha256(zlib.files["zlib_1.3.orig.tar.gz"]).hexdigest(), "0" * 64
    )
    result = fetch(archive, pins, tmp_path / "out")
    assert result.returncode == 1
    assert "checksum mismatch: pool/main/z/zlib/zlib_1.3.orig.tar.gz" in result.stderr


def test_a_gone_revision_is_replaced_by_the_newest_one_served(
    archive: Archive, tmp_path: Path
) -> None:
    zlib = revision("zlib", "1.3", "1")
    pinned, served, unserved = (revision("libxyz", v, "1") for v in ("2.0", "2.1", "2.2"))
    # 2.0 has left the pool; the index lists 2.1 and 2.2, the mirror has only 2.1 so far.
    archive.publish([zlib, served, unserved], [zlib, served])
    pins = archive.pin(zlib, "zlib_1.3.orig.tar.gz") + archive.pin(
        pinned, "libxyz_2.0.orig.tar.gz", "libxyz_2.0-1.debian.tar.xz"
    )
    out = tmp_path / "out"
    result = fetch(archive, pins, out)
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in out.iterdir()) == [
        "libxyz_2.1-1.debian.tar.xz", "libxyz_2.1.orig.tar.gz", "zlib_1.3.orig.tar.gz",
    ]  # fmt: skip
    for name in ("libxyz_2.1.orig.tar.gz", "libxyz_2.1-1.debian.tar.xz"):
        assert (out / name).read_bytes() == served.files[name]
    assert "using trixie's 2.1-1" in result.stderr
    assert archive.pin(served, "libxyz_2.1.orig.tar.gz").strip() in result.stderr


def test_a_replacement_that_differs_from_the_signed_index_stops_the_build(
    archive: Archive, tmp_path: Path
) -> None:
    pinned, current = revision("zlib", "1.3", "1"), revision("zlib", "1.3.1", "1")
    archive.publish([current], [current])
    (archive.root / current.directory / "zlib_1.3.1.orig.tar.gz").write_bytes(b"not that")
    result = fetch(archive, archive.pin(pinned, "zlib_1.3.orig.tar.gz"), tmp_path / "out")
    assert result.returncode == 1
    assert "no revision of zlib in trixie's index could be fetched" in result.stderr
