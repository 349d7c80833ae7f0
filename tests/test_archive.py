"""Reading a ``.eval`` zip's entries straight from the file (sources/logfiles/archive.py):
the same bytes as :mod:`zipfile` for every method Inspect writes, the same refusals."""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

import pytest
import zipfile_zstd  # noqa: F401  (registers zstd with zipfile, as Inspect does)

from watcher.sources.logfiles.archive import EntryTooLarge, _read_entry, open_zip

ZSTD = 93
DOC = b'{"events": [' + b", ".join(b'{"n": %d, "text": "step %d"}' % (i, i)
                                   for i in range(3000)) + b"]}"


def _zip(path: Path, method: int, data: bytes = DOC, name: str = "samples/a_epoch_1.json") -> Path:
    with zipfile.ZipFile(path, "w", compression=method) as z:
        z.writestr(name, data)
    return path


@pytest.mark.parametrize("method", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, ZSTD])
def test_every_method_reads_as_zipfile_does(tmp_path: Path, method: int) -> None:
    path = _zip(tmp_path / f"m{method}.eval", method)
    z = zipfile.ZipFile(path)
    [info] = z.infolist()
    assert _read_entry(z, info, len(DOC) + 1) == DOC == z.read(info.filename)
    assert open_zip(str(path)).read(info.filename, len(DOC)) == DOC


@pytest.mark.parametrize("method", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, ZSTD])
def test_inflating_stops_at_the_limit(tmp_path: Path, method: int) -> None:
    """An entry whose directory understates its size is still cut at the limit."""
    path = _zip(tmp_path / f"big{method}.eval", method, b"0" * 3_000_000)
    z = zipfile.ZipFile(path)
    [info] = z.infolist()
    got = _read_entry(z, info, 1000)
    if method == zipfile.ZIP_STORED:  # 3 MB stored for 1 KB wanted: zipfile reads it
        assert got is None
    else:  # inflating stopped at the limit
        assert got is not None and len(got) == 1000
    shared = open_zip(str(path))
    shared._z.getinfo(info.filename).file_size = 10  # the directory lies
    # refused either way: inflated past the limit, or (stored, zipfile's read) the lie
    # caught by the CRC
    with pytest.raises(zipfile.BadZipFile if method == zipfile.ZIP_STORED else EntryTooLarge):
        shared.read(info.filename, 2000)


def test_a_corrupt_entry_is_refused_not_returned(tmp_path: Path) -> None:
    """A flipped byte in a stored entry fails its CRC; a local header naming another
    file fails as in zipfile: the caller then asks Inspect's reader."""
    path = _zip(tmp_path / "bad.eval", zipfile.ZIP_STORED)
    raw = bytearray(path.read_bytes())
    at = raw.index(b"step 17")
    raw[at] ^= 0x20
    path.write_bytes(bytes(raw))
    z = zipfile.ZipFile(path)
    [info] = z.infolist()
    with pytest.raises(zipfile.BadZipFile, match="CRC"):
        _read_entry(z, info, len(DOC) + 1)
    renamed = _zip(tmp_path / "renamed.eval", ZSTD, name="samples/b_epoch_1.json")
    raw = bytearray(renamed.read_bytes())
    raw[30:30 + len("samples/b")] = b"samples/c"  # the local header's name only
    renamed.write_bytes(bytes(raw))
    z = zipfile.ZipFile(renamed)
    [info] = z.infolist()
    with pytest.raises(zipfile.BadZipFile, match="differ"):
        _read_entry(z, info, len(DOC) + 1)


def test_encrypted_entries_are_left_to_zipfile(tmp_path: Path) -> None:
    path = _zip(tmp_path / "enc.eval", zipfile.ZIP_DEFLATED)
    z = zipfile.ZipFile(path)
    [info] = z.infolist()
    info.flag_bits |= 0x1
    assert _read_entry(z, info, len(DOC) + 1) is None


def test_a_sample_read_trusts_the_log_sources_stamp(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Reading samples' events stats the log as the source's stamp policy says, never
    again inside the zip reader (a scan of 5,000 small samples stat'ed it 5,000 times),
    and a log rewritten since is still read anew once the source sees its new stamp."""
    from tests.hostile_logs import log_name, repeat_events, sample, write_eval
    from watcher.sources.logfiles import archive
    from watcher.sources.logfiles.source import LogSource

    path = tmp_path / log_name("a")
    write_eval(path, "evalA", {f"s{i}": sample(f"s{i}", repeat_events()) for i in range(5)})
    src = LogSource(str(path))
    [task] = src.tasks()
    unvouched: list[str] = []
    real_open = archive.open_zip

    def open_zip(path: str, stamp: Any = None) -> Any:
        if stamp is None:
            unvouched.append(path)
        return real_open(path, stamp)

    monkeypatch.setattr(archive, "open_zip", open_zip)
    for i in range(5):
        page = src.events(task, f"s{i}", 1, since=None, types=None, tier="content")
        assert page.events
    assert unvouched == []  # every read was vouched for by the source's own stamp
    monkeypatch.undo()
    write_eval(path, "evalA", {f"s{i}": sample(f"s{i}", repeat_events(3)) for i in range(5)})
    [task] = src.tasks()  # a listing stats the log, and sees it changed
    page = src.events(task, "s0", 1, since=None, types=None, tier="content")
    assert len(page.events) == len(sample("s0", repeat_events(3))["events"])


def test_a_directory_overstating_the_compressed_size_is_left_to_zipfile(tmp_path: Path) -> None:
    """Compressed data far larger than what it inflates to is not read whole into memory
    here: zipfile reads it a chunk at a time."""
    path = _zip(tmp_path / "odd.eval", ZSTD)
    z = zipfile.ZipFile(path)
    [info] = z.infolist()
    info.compress_size = len(DOC) + (1 << 20)
    assert _read_entry(z, info, len(DOC) + 1) is None


def test_corrupt_zstd_data_is_a_bad_zip_not_a_crash(tmp_path: Path) -> None:
    path = _zip(tmp_path / "rot.eval", ZSTD)
    raw = bytearray(path.read_bytes())
    z = zipfile.ZipFile(path)
    [info] = z.infolist()
    start = info.header_offset + 30 + len(info.filename)
    raw[start:start + 4] = b"\x00\x00\x00\x00"  # the zstd frame's magic number
    path.write_bytes(bytes(raw))
    z = zipfile.ZipFile(path)
    [info] = z.infolist()
    with pytest.raises(zipfile.BadZipFile, match="zstd"):
        _read_entry(z, info, len(DOC) + 1)


@pytest.mark.parametrize("off", [-1, 0, 1])
def test_a_zstd_entry_is_inflated_whole_whatever_its_directory_says(tmp_path: Path,
                                                                     off: int) -> None:
    """An entry is inflated in one call into the size the directory gives (its frames
    carry none, as Inspect's do not); one size too small or too large still gives the
    whole entry, never a cut one (the chunked path reads on, and the CRC checks it)."""
    path = _zip(tmp_path / "sized.eval", ZSTD)
    z = zipfile.ZipFile(path)
    [info] = z.infolist()
    info.file_size = len(DOC) + off
    assert _read_entry(z, info, len(DOC) + 10) == DOC
