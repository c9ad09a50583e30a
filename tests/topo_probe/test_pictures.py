"""topo_probe.pictures: the mark every PNG topocoll draws carries, read back by PIL (an independent
PNG reader) and by hand-built chunks; hostile heads (truncated, flipped, random) are never ours."""

from __future__ import annotations

import struct
import zlib

import matplotlib
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topo_probe.pictures import PNG_SIGNATURE, is_our_png, png_text_chunks, save_png

matplotlib.use("Agg")


def _figure():
    from matplotlib.figure import Figure
    fig = Figure(figsize=(2, 1.5))
    fig.add_subplot().plot([1, 2, 3], [3, 1, 2])
    return fig


@pytest.fixture(scope="module")
def ours(tmp_path_factory) -> bytes:
    path = tmp_path_factory.mktemp("png") / "ours.png"
    save_png(_figure(), path, "sweep --plot", dpi=50)
    return path.read_bytes()


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def test_save_png_writes_the_mark_pil_reads(ours, tmp_path):
    from PIL import Image
    path = tmp_path / "p.png"
    path.write_bytes(ours)
    with Image.open(path) as img:
        assert img.text["Software"] == "topocoll: sweep --plot"        # PIL's own tEXt reader
    assert is_our_png(ours[:4096]) and png_text_chunks(ours[:4096])["Software"] == "topocoll: sweep --plot"


def test_a_plain_matplotlib_png_is_not_ours(tmp_path):
    path = tmp_path / "theirs.png"
    _figure().savefig(path, dpi=50)                 # matplotlib's default Software text
    head = path.read_bytes()[:4096]
    assert png_text_chunks(head)["Software"].startswith("Matplotlib") and not is_our_png(head)


def test_hand_built_chunks():
    ihdr = _chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 0, 0, 0, 0))
    idat = _chunk(b"IDAT", zlib.compress(b"\0\0"))
    mark = _chunk(b"tEXt", b"Software\0topocoll: x")
    assert is_our_png(PNG_SIGNATURE + ihdr + mark + idat)
    assert not is_our_png(PNG_SIGNATURE + ihdr + idat + mark)                 # after the image data: not read
    assert not is_our_png(PNG_SIGNATURE + ihdr + _chunk(b"tEXt", b"Software\0Matplotlib") + idat)
    bad_crc = mark[:-1] + bytes([mark[-1] ^ 1])
    assert not is_our_png(PNG_SIGNATURE + ihdr + bad_crc + idat)
    assert not is_our_png(PNG_SIGNATURE + ihdr + mark)                        # no IDAT in the head: cut short
    assert not is_our_png(PNG_SIGNATURE + b"garbage" * 20) and not is_our_png(b"")


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_a_damaged_head_is_never_ours(ours, data):
    """Any cut before the image data begins, or any flipped bit before it, makes the file not ours
    (the CRC-32 of each chunk, the signature, the length limit)."""
    idat = ours.index(b"IDAT") - 4
    cut = data.draw(st.integers(0, idat + 7))
    assert not is_our_png(ours[:cut])
    at, bit = data.draw(st.integers(0, idat - 1)), data.draw(st.integers(0, 7))
    flipped = bytearray(ours[:4096])
    flipped[at] ^= 1 << bit
    assert not is_our_png(bytes(flipped))


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_random_bytes_after_the_signature_are_not_ours(tail):
    assert not is_our_png(PNG_SIGNATURE + tail) and png_text_chunks(tail.lstrip(b"\x89")) is None


@pytest.mark.parametrize("mask", [0o022, 0o027, 0o077])
def test_save_png_gives_a_plain_open_s_mode_without_touching_the_umask(tmp_path, monkeypatch, mask):
    """The picture's mode is 0o666 minus the process umask (what ``open`` gives a new file), read
    without ``os.umask``: setting it is process-wide, another thread's file would get the wrong mode."""
    import os
    import stat
    old = os.umask(mask)
    try:
        def forbidden(_mask):
            raise AssertionError("save_png changed the process umask")
        monkeypatch.setattr(os, "umask", forbidden)
        save_png(_figure(), tmp_path / "p.png", "sweep --plot", dpi=20)
        monkeypatch.undo()
        plain = tmp_path / "plain"
        plain.write_bytes(b"")                                      # the reference: a plain open's mode
        assert stat.S_IMODE((tmp_path / "p.png").stat().st_mode) == stat.S_IMODE(plain.stat().st_mode) == 0o666 & ~mask
    finally:
        os.umask(old)
