"""Files: streamed read/write from and to file objects, list/stat/glob/move/chmod/remove,
directories through tar archives."""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
from pathlib import Path

import pytest

from svc_sdk import BadRequestError, NotFoundError, RangeNotSatisfiableError, Sandbox

BLOB = bytes(range(256)) * 4096 + b"\x00tail\xff"  # 1 MiB + a bit, every byte value


def test_write_and_read_bytes_and_text(sandbox: Sandbox) -> None:
    info = sandbox.files.write("/data/blob.bin", BLOB)
    assert info.status == "written" and info.size == len(BLOB)
    assert sandbox.files.read("/data/blob.bin") == BLOB
    sandbox.files.write("/data/note.txt", "héllo\n")
    assert sandbox.files.read_text("/data/note.txt") == "héllo\n"
    assert sandbox.files.read("/data/note.txt") == "héllo\n".encode()
    sandbox.files.write_text("/data/other.txt", "x", mode=0o600)
    assert sandbox.files.stat("/data/other.txt").mode == "0600"


def test_write_from_file_object_and_iterator(sandbox: Sandbox, tmp_path: Path) -> None:
    local = tmp_path / "src.bin"
    local.write_bytes(BLOB)
    with open(local, "rb") as f:
        assert sandbox.files.write("/up/from-file.bin", f).size == len(BLOB)
    assert sandbox.files.write("/up/from-iter.bin", (bytes([i]) * 1000 for i in range(10))).size == 10_000
    assert sandbox.files.read("/up/from-iter.bin") == b"".join(bytes([i]) * 1000 for i in range(10))
    out = io.BytesIO()
    assert sandbox.files.read_to("/up/from-file.bin", out) == len(BLOB)
    assert out.getvalue() == BLOB


def test_ranged_reads_resume_a_download(sandbox: Sandbox) -> None:
    sandbox.files.write("/r.bin", BLOB)
    assert sandbox.files.read("/r.bin", offset=10, length=5) == BLOB[10:15]
    out = io.BytesIO(BLOB[:1000])
    out.seek(1000)
    sandbox.files.read_to("/r.bin", out, offset=1000)
    assert out.getvalue() == BLOB
    with pytest.raises(RangeNotSatisfiableError) as err:
        sandbox.files.read("/r.bin", offset=len(BLOB) + 10)
    assert err.value.status == 416


def test_list_stat_exists_glob(sandbox: Sandbox) -> None:
    sandbox.files.write("/tree/b.txt", "b")
    sandbox.files.write("/tree/a.txt", "aa")
    sandbox.files.write("/tree/sub/deep/c.txt", "c")
    entries = sandbox.files.list("/tree")
    assert [e.name for e in entries] == ["a.txt", "b.txt", "sub"]
    a = entries[0]
    assert (a.path, a.size, a.is_dir, a.mode) == ("/tree/a.txt", 2, False, "0644")
    assert entries[2].is_dir
    st = sandbox.files.stat("/tree/sub")
    assert st.is_dir and st.name == "sub" and st.mod_time
    assert sandbox.files.exists("/tree/a.txt")
    assert not sandbox.files.exists("/tree/nope.txt")
    assert sandbox.files.glob("/tree/**/*.txt") == ["/tree/a.txt", "/tree/b.txt", "/tree/sub/deep/c.txt"]
    assert sandbox.files.glob("/tree/?.txt") == ["/tree/a.txt", "/tree/b.txt"]


def test_move_chmod_remove_make_dir(sandbox: Sandbox) -> None:
    sandbox.files.write("/m/src.txt", "move me")
    sandbox.files.write("/m/dst.txt", "old")
    sandbox.files.move("/m/src.txt", "/m/dst.txt")
    assert sandbox.files.read_text("/m/dst.txt") == "move me"
    assert not sandbox.files.exists("/m/src.txt")
    sandbox.files.rename("/m/dst.txt", "/m/new/place.txt")
    assert sandbox.files.read_text("/m/new/place.txt") == "move me"
    with pytest.raises(NotFoundError):
        sandbox.files.move("/m/missing", "/m/x")

    sandbox.files.chmod("/m/new/place.txt", 0o755)
    assert sandbox.files.stat("/m/new/place.txt").mode == "0755"
    sandbox.files.chmod("/m/new/place.txt", "0640")
    assert sandbox.files.stat("/m/new/place.txt").mode == "0640"

    sandbox.files.make_dir("/m/empty/nested")
    assert sandbox.files.stat("/m/empty/nested").is_dir

    with pytest.raises(BadRequestError):
        sandbox.files.remove("/m/new")  # not empty
    sandbox.files.remove("/m/new", recursive=True)
    assert not sandbox.files.exists("/m/new")
    sandbox.files.remove("/m/empty/nested")
    assert not sandbox.files.exists("/m/empty/nested")


def test_file_errors(sandbox: Sandbox) -> None:
    with pytest.raises(NotFoundError) as err:
        sandbox.files.read("/does/not/exist")
    assert err.value.code == "not_found"
    with pytest.raises(BadRequestError) as bad:
        sandbox.files.read("relative/path")
    assert bad.value.code == "bad_request"
    sandbox.files.make_dir("/adir")
    with pytest.raises(BadRequestError):
        sandbox.files.read("/adir")


def _make_tree(root: Path) -> None:
    (root / "sub" / "deeper").mkdir(parents=True)
    (root / "empty").mkdir()
    (root / "top.txt").write_text("top level\n")
    (root / "sub" / "bin.dat").write_bytes(BLOB)
    (root / "sub" / "deeper" / "z.txt").write_bytes(b"")
    (root / "sub" / "exec.sh").write_text("#!/bin/sh\necho hi\n")
    os.chmod(root / "sub" / "exec.sh", 0o755)


def _digest(root: Path) -> dict[str, tuple[str, str]]:
    out: dict[str, tuple[str, str]] = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if p.is_dir():
            out[rel] = ("dir", "")
        else:
            out[rel] = (hashlib.sha256(p.read_bytes()).hexdigest(), oct(p.stat().st_mode & 0o777))
    return out


def test_directory_round_trip(sandbox: Sandbox, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    _make_tree(src)
    info = sandbox.files.upload_dir(src, "/project")
    assert info.status == "extracted" and info.entries == 7
    assert sandbox.files.read("/project/sub/bin.dat") == BLOB
    assert sandbox.files.stat("/project/sub/exec.sh").mode == "0755"
    assert sandbox.files.stat("/project/empty").is_dir
    dst = tmp_path / "dst"
    count = sandbox.files.download_dir("/project", dst)
    assert count == 7
    assert _digest(dst) == _digest(src)


def test_raw_archives(sandbox: Sandbox) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        data = b"from a tar"
        ti = tarfile.TarInfo("inner/file.txt")
        ti.size = len(data)
        tar.addfile(ti, io.BytesIO(data))
    buf.seek(0)
    assert sandbox.files.write_archive("/arch", buf).entries >= 1
    assert sandbox.files.read_text("/arch/inner/file.txt") == "from a tar"
    out = io.BytesIO()
    assert sandbox.files.read_archive("/arch", out) > 0
    out.seek(0)
    with tarfile.open(fileobj=out) as tar:
        names = {n.lstrip("./").rstrip("/") for n in tar.getnames()}
    assert {"inner", "inner/file.txt"} <= names
    evil = io.BytesIO()
    with tarfile.open(fileobj=evil, mode="w") as tar:
        ti = tarfile.TarInfo("../escape.txt")
        ti.size = 1
        tar.addfile(ti, io.BytesIO(b"x"))
    with pytest.raises(BadRequestError):
        sandbox.files.write_archive("/arch", evil.getvalue())
