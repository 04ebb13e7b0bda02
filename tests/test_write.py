"""Tests for guidedbp.io.write: atomic files, reproducible PNG bytes, npy, resizing."""

from __future__ import annotations

import io
import os
import re
import signal
import struct
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, PngImagePlugin

from guidedbp.io import write

TEMP_NAME = re.compile(r"^\.(?P<name>.+)\.(?P<pid>\d+)\.[0-9a-f]{8}\.tmp$")


def _listing(folder: Path) -> list[str]:
    return sorted(os.listdir(folder))


# ---------------------------------------------------------------- atomic write

def test_atomic_write_creates_parents_and_leaves_only_the_target(tmp_path):
    target = tmp_path / "a" / "b" / "out.bin"
    write.atomic_write_bytes(target, b"\x00\x01hello")
    assert target.read_bytes() == b"\x00\x01hello"
    assert _listing(target.parent) == ["out.bin"]


def test_atomic_write_replaces_and_accepts_bytes_like(tmp_path):
    target = tmp_path / "out.bin"
    target.write_bytes(b"old contents that are longer")
    write.atomic_write_bytes(str(target), bytearray(b"new"))
    assert target.read_bytes() == b"new"
    write.atomic_write_bytes(target, memoryview(b"view!"))
    assert target.read_bytes() == b"view!"
    write.atomic_write_bytes(target, b"")
    assert target.read_bytes() == b""
    assert _listing(tmp_path) == ["out.bin"]


def test_temporary_file_is_hidden_in_the_same_folder(tmp_path, monkeypatch):
    seen = []
    real_replace = os.replace

    def spy(source, destination):
        seen.append((source, Path(source).read_bytes()))
        real_replace(source, destination)

    monkeypatch.setattr(os, "replace", spy)
    write.atomic_write_bytes(tmp_path / "x.png", b"data")
    (source, contents), = seen
    assert Path(source).parent == tmp_path
    match = TEMP_NAME.match(Path(source).name)
    assert match and match["name"] == "x.png" and int(match["pid"]) == os.getpid()
    assert contents == b"data"  # complete before the rename


@pytest.mark.skipif(os.name != "posix", reason="POSIX permission bits")
def test_new_file_gets_default_permissions(tmp_path):
    umask = os.umask(0o022)
    os.umask(umask)
    write.atomic_write_bytes(tmp_path / "f", b"x")
    assert (tmp_path / "f").stat().st_mode & 0o777 == 0o666 & ~umask


def test_failed_replace_keeps_old_target_and_removes_temp(tmp_path, monkeypatch):
    target = tmp_path / "out.bin"
    target.write_bytes(b"previous")

    def refuse(source, destination):
        raise OSError("simulated rename failure")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(OSError, match="simulated rename failure"):
        write.atomic_write_bytes(target, b"new data")
    assert target.read_bytes() == b"previous"
    assert _listing(tmp_path) == ["out.bin"]


def test_failure_mid_write_leaves_nothing(tmp_path, monkeypatch):
    # The real os.write stores the first 3 bytes, then the disk "fills up".
    real_write = os.write
    calls = []

    def write_then_fail(descriptor, data):
        calls.append(len(data))
        if len(calls) == 1:
            return real_write(descriptor, bytes(data[:3]))
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", write_then_fail)
    target = tmp_path / "sub" / "out.bin"
    with pytest.raises(OSError, match="No space left"):
        write.atomic_write_bytes(target, b"0123456789")
    assert calls == [10, 7]  # a short write was retried with the rest
    assert not target.exists()
    assert _listing(target.parent) == []


def test_failed_fsync_keeps_old_target(tmp_path, monkeypatch):
    target = tmp_path / "out.bin"
    target.write_bytes(b"previous")

    def no_sync(descriptor):
        raise OSError("simulated fsync failure")

    monkeypatch.setattr(os, "fsync", no_sync)
    with pytest.raises(OSError, match="fsync"):
        write.atomic_write_bytes(target, b"new", durable=True)
    assert target.read_bytes() == b"previous"
    assert _listing(tmp_path) == ["out.bin"]


def test_rejects_non_bytes_and_folder_paths(tmp_path):
    with pytest.raises(TypeError, match="str"):
        write.atomic_write_bytes(tmp_path / "f.txt", "text")
    with pytest.raises(ValueError, match="must name a file"):
        write.atomic_write_bytes(str(tmp_path) + os.sep, b"x")
    with pytest.raises(ValueError, match="must name a file"):
        write.atomic_write_bytes("", b"x")
    assert _listing(tmp_path) == []


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_killed_writer_never_leaves_a_truncated_target(tmp_path):
    # A child rewrites one file in a loop with 1 MiB of a single repeated byte;
    # we SIGKILL it mid-stream. The target must hold one whole version.
    size = 1 << 20
    target = tmp_path / "out.bin"
    child = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        from guidedbp.io.write import atomic_write_bytes
        for i in range(100000):
            atomic_write_bytes({str(target)!r}, bytes([i % 251]) * {size})
    """)])
    try:
        deadline = time.monotonic() + 30
        while not target.exists() and time.monotonic() < deadline and child.poll() is None:
            time.sleep(0.01)
        assert target.exists(), "the writer never produced a file"
        time.sleep(0.2)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    data = target.read_bytes()
    assert len(data) == size
    assert data == data[:1] * size
    for name in _listing(tmp_path):  # a SIGKILL may leave one hidden temp, nothing else
        assert name == "out.bin" or TEMP_NAME.match(name), name


# ------------------------------------------------------------------------ PNG

def _png_chunks(data: bytes) -> list[bytes]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    kinds, offset = [], 8
    while offset < len(data):
        (length,) = struct.unpack(">I", data[offset:offset + 4])
        kinds.append(data[offset + 4:offset + 8])
        offset += 12 + length
    return kinds


@pytest.mark.parametrize("shape, mode", [((5, 7), "L"), ((5, 7, 3), "RGB"), ((5, 7, 1), "L")])
def test_png_round_trip(shape, mode):
    rng = np.random.default_rng(0)
    array = rng.integers(0, 256, size=shape, dtype=np.uint8)
    data = write.encode_png(array)
    with Image.open(io.BytesIO(data)) as image:
        assert image.format == "PNG"
        assert image.mode == mode
        assert image.size == (7, 5)
        decoded = np.array(image)
    np.testing.assert_array_equal(decoded, array.reshape(decoded.shape))


def test_png_bytes_are_reproducible_and_carry_only_guidedbps_mark():
    rng = np.random.default_rng(1)
    array = rng.integers(0, 256, size=(16, 9, 3), dtype=np.uint8)
    first = write.encode_png(array)
    assert write.encode_png(array.copy()) == first
    assert write.encode_png(np.asfortranarray(array)) == first  # memory layout does not matter
    kinds = _png_chunks(first)
    assert kinds[0] == b"IHDR" and kinds[1] == b"tEXt" and kinds[-1] == b"IEND"
    assert set(kinds[2:-1]) == {b"IDAT"}  # no tIME, pHYs, ...: nothing that changes
    with Image.open(io.BytesIO(first)) as image:
        assert image.text == {"Software": "guidedbp"}
    # IHDR: width 9, height 16, bit depth 8, colour type 2 (RGB).
    assert struct.unpack(">IIBB", first[16:26]) == (9, 16, 8, 2)


@pytest.mark.parametrize(
    "array, message",
    [
        (np.zeros((4, 4), np.float32), "uint8"),
        (np.zeros((4, 4, 4), np.uint8), "shape"),
        (np.zeros((4, 4, 2), np.uint8), "shape"),
        (np.zeros((4,), np.uint8), "shape"),
        (np.zeros((0, 4), np.uint8), "empty"),
    ],
)
def test_encode_png_rejects(array, message):
    with pytest.raises(ValueError, match=message):
        write.encode_png(array)


def test_save_png_writes_a_decodable_file(tmp_path):
    array = np.arange(24, dtype=np.uint8).reshape(2, 4, 3)
    target = tmp_path / "maps" / "cat_color.png"
    write.save_png(target, array)
    assert target.read_bytes() == write.encode_png(array)
    np.testing.assert_array_equal(np.array(Image.open(target)), array)
    assert _listing(target.parent) == ["cat_color.png"]


def test_save_png_bad_array_writes_nothing(tmp_path):
    with pytest.raises(ValueError):
        write.save_png(tmp_path / "bad.png", np.zeros((2, 2), np.float64))
    assert _listing(tmp_path) == []


# ------------------------------------------------------------------------ npy

def test_save_npy_round_trip(tmp_path):
    array = np.array([[[0.5, -1.25, 3.0]], [[1e-8, 0.0, -0.0]]], dtype=np.float32)
    target = tmp_path / "cat.npy"
    write.save_npy(target, array)
    loaded = np.load(target, allow_pickle=False)
    assert loaded.dtype == np.float32 and loaded.shape == (2, 1, 3)
    np.testing.assert_array_equal(loaded, array)
    assert _listing(tmp_path) == ["cat.npy"]


def test_save_npy_rejects_objects(tmp_path):
    with pytest.raises(ValueError, match="object"):
        write.save_npy(tmp_path / "o.npy", np.array([{"a": 1}], dtype=object))
    assert _listing(tmp_path) == []


def test_own_pngs_are_recognised_and_nothing_else(tmp_path):
    write.save_png(tmp_path / "ours.png", np.zeros((3, 4, 3), np.uint8))
    Image.fromarray(np.zeros((3, 4, 3), np.uint8)).save(tmp_path / "theirs.png")
    marked = PngImagePlugin.PngInfo()
    marked.add_text("Software", "gimp")
    Image.fromarray(np.zeros((3, 4), np.uint8)).save(tmp_path / "gimp.png", pnginfo=marked)
    (tmp_path / "text.png").write_bytes(b"tEXtSoftware\x00guidedbp")
    assert write.is_own_png(tmp_path / "ours.png")
    assert not any(write.is_own_png(tmp_path / name)
                   for name in ("theirs.png", "gimp.png", "text.png", "missing.png"))
    assert write.is_whole_png(tmp_path / "ours.png") and write.is_whole_png(tmp_path / "theirs.png")
    data = (tmp_path / "ours.png").read_bytes()
    (tmp_path / "cut.png").write_bytes(data[:-5])
    (tmp_path / "empty.png").write_bytes(b"")
    assert not write.is_whole_png(tmp_path / "cut.png")
    assert not write.is_whole_png(tmp_path / "empty.png")
