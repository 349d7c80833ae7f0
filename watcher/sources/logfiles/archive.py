"""Reading a local ``.eval`` log's zip directly, within limits.

An ``.eval`` log is a zip of JSON documents (header, sample summaries, one document
per sample). A finished log's documents are read here with :mod:`zipfile` and orjson,
much faster than through Inspect's reader, and every entry is checked against
:data:`~watcher.limits.LOG_ENTRY_SIZE` before and while it is inflated (a zip bomb
stops at the limit). Open zips are cached and shared between threads (reads are
serialised); a forked worker drops the cache (:func:`forget_open_zips`).
"""

from __future__ import annotations

import os
import struct
import threading
import zlib
from collections import OrderedDict
from typing import Any

# a sample's JSON is tens of KB: orjson decodes it several times faster. It refuses NaN
# and huge integers (a ValueError): such a log goes to Inspect's reader
from orjson import loads

try:  # CRC-32 with the processor's carry-less multiply: 5x zlib's, the same sums
    from zlib_ng.zlib_ng import crc32
except ImportError:  # (a platform without its wheel)
    from zlib import crc32

from watcher import limits
from watcher.sources.base import LimitExceeded
from watcher.sources.logfiles.listing import local_path

_ZIPS: OrderedDict[tuple[str, Any, Any], Any] = OrderedDict()
_ZIPS_LOCK = threading.Lock()


def open_zip(path: str, stamp: tuple[Any, Any] | None = None) -> Any:
    """An open ``ZipFile`` for ``path``, reused while the file is unchanged.

    Reading the central directory of a 1,000-sample log costs milliseconds; doing it
    once per sample made post-hoc scans quadratic in the number of samples. ``stamp``:
    the file's ``(size, mtime)`` as :func:`~watcher.sources.logfiles.listing.local_info`
    has just taken it, which the caller vouches for (no second stat per sample read).
    """
    import zipfile

    if stamp is None:
        st = os.stat(path)
        stamp = (st.st_size, st.st_mtime_ns / 1e6)  # as local_info reports them
    key = (path, stamp[0], stamp[1])
    with _ZIPS_LOCK:
        z = _ZIPS.get(key)
        if z is None:
            z = zipfile.ZipFile(path)
            _ZIPS[key] = z
            while len(_ZIPS) > 8:
                _ZIPS.popitem(last=False)[1].close()
        else:
            _ZIPS.move_to_end(key)
        return _LockedZip(z)


def forget_open_zips() -> None:
    """Drop (without closing) the cached zip handles: for a forked child, whose
    inherited file descriptors share their read offsets with the parent's."""
    with _ZIPS_LOCK:
        _ZIPS.clear()


class _LockedZip:
    """A shared ``ZipFile`` whose reads are serialised (threads share one file handle)."""

    def __init__(self, z: Any) -> None:
        self._z = z

    def read(self, name: str, limit: float | None = None) -> bytes:
        """An entry's bytes; past ``limit`` (checked before inflating, then while
        inflating: the declared size may lie) :class:`EntryTooLarge`."""
        with _ZIPS_LOCK:
            if limit is None:
                data: bytes = self._z.read(name)
                return data
            info = self._z.getinfo(name)
            if info.file_size > limit:
                raise EntryTooLarge(name, info.file_size, limit)
            got = _read_entry(self._z, info, int(limit) + 1)
            if got is None:
                with self._z.open(name) as fh:
                    got = fh.read(int(limit) + 1)
            data = got
        if len(data) > limit:
            raise EntryTooLarge(name, len(data), limit)
        return data

    def size(self, name: str) -> int:
        with _ZIPS_LOCK:
            return int(self._z.getinfo(name).file_size)


# a local file header: signature, versions and flags, then the name's and the extra
# field's lengths at offset 26 (the sizes are the central directory's, in the ZipInfo)
_LOCAL_HEADER = 30
_CHUNK = 4096  # compressed bytes inflated at a time: zipfile's own bound on overshoot
_ZSTD = 93  # the method zipfile-zstd registers, which Inspect writes
_SLACK = 1 << 16  # how far compressed data may exceed what it inflates to (framing)


def _read_entry(z: Any, info: Any, most: int) -> bytes | None:
    """At most ``most`` bytes of an entry inflated straight from the zip's file, or
    ``None`` where :mod:`zipfile` must do it (encrypted, patched, another method).

    The same checks as ``ZipFile.open`` (the header's signature and name) and as its
    reader (the CRC, when the entry was read whole); what it saves is zipfile's set-up
    per entry, a new zstd decompressor above all: a small sample's entry took 100 us
    through zipfile and takes 50 here, on a scan reading thousands of them. Inflating is
    bounded as zipfile's is:
    4 KB of input at a time, stopping once ``most`` bytes are out. Callers hold the
    zip's lock (the file's offset is shared).
    """
    import zipfile

    method = info.compress_type
    if info.flag_bits & 0x61 or method not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED,
                                               _ZSTD):
        return None  # encrypted (bits 0 and 6) or patched data (bit 5); other methods
    fp = z.fp
    if fp is None or info.compress_size > most + _SLACK:
        # (compressed data never outgrows what it inflates to by more than its framing:
        # a directory saying otherwise is read by zipfile, a chunk at a time)
        return None
    fp.seek(info.header_offset)
    head = fp.read(_LOCAL_HEADER)
    if len(head) != _LOCAL_HEADER or head[:4] != b"PK\x03\x04":
        raise zipfile.BadZipFile(f"bad local file header for {info.filename!r}")
    name_len, extra_len = struct.unpack_from("<HH", head, 26)
    name = fp.read(name_len)
    flags = struct.unpack_from("<H", head, 6)[0]
    encoding = "utf-8" if flags & 0x800 else getattr(z, "metadata_encoding", None) or "cp437"
    text = name.decode(encoding)
    if text != info.orig_filename:
        raise zipfile.BadZipFile(f"file name in directory {info.orig_filename!r} and "
                                 f"header {name!r} differ")
    if extra_len:
        fp.seek(extra_len, os.SEEK_CUR)
    raw = fp.read(info.compress_size)
    if len(raw) != info.compress_size:
        raise zipfile.BadZipFile(f"truncated entry {info.filename!r}")
    if method == zipfile.ZIP_STORED:
        data = raw[:most]
    elif method == zipfile.ZIP_DEFLATED:
        data = zlib.decompressobj(-15).decompress(raw, most)
    else:
        data = _inflate_zstd(raw, most, info.file_size)
    if len(data) < most and crc32(data) != info.CRC:
        raise zipfile.BadZipFile(f"bad CRC-32 for file {info.filename!r}")
    return data


_DCTX: list[Any] = []  # one zstd decompression context, reused (callers hold the lock)


def _inflate_zstd(raw: bytes, most: int, size: int = 0) -> bytes:
    """At most ``most`` bytes of a zstd frame. ``size``: what the zip's directory says
    it inflates to; when the frame says no more (or nothing), it is inflated in one call
    into a buffer of that size (the chunks and their join copied every sample twice),
    and anything that call refuses is read a chunk at a time, as before."""
    import zipfile

    import zstandard  # (only a zstd log needs it)

    if not _DCTX:
        _DCTX.append(zstandard.ZstdDecompressor())
    if 0 < size < most:
        try:
            declared = zstandard.frame_content_size(raw)
            if declared == -1 or 0 <= declared <= size:
                out: bytes = _DCTX[0].decompress(raw, max_output_size=size)
                return out
        except zstandard.ZstdError:
            pass  # (more than the directory says, or corrupt: the chunks say which)
    obj = _DCTX[0].decompressobj()
    view = memoryview(raw)
    parts: list[bytes] = []
    got = 0
    try:
        for at in range(0, len(raw), _CHUNK):
            part = obj.decompress(view[at:at + _CHUNK])
            parts.append(part)
            got += len(part)
            if got >= most:
                break
    except zstandard.ZstdError as exc:  # corrupt data, or bytes after the frame
        raise zipfile.BadZipFile(f"zstd: {exc}") from exc
    data = b"".join(parts)
    return data[:most] if len(data) > most else data


class EntryTooLarge(LimitExceeded):
    """A log's zip entry inflates past the limit (a zip bomb, or a limit set too low)."""

    def __init__(self, name: str, size: float, limit: float) -> None:
        super().__init__(f"{name} inflates to {size / limits.MB:.1f} MB or more, over the "
                         f"{limit / limits.MB:g} MB limit ({limits.LOG_ENTRY_SIZE.env} "
                         "raises it); not read")


def sample_entry(sid: Any, epoch: int) -> str:
    """The name of a sample's entry in an ``.eval`` zip."""
    return f"samples/{sid}_epoch_{epoch}.json"


def sample_json(data: Any) -> dict[str, Any] | None:
    """A decoded sample entry, if it is one this reader takes (else Inspect's reader)."""
    if not isinstance(data, dict) or not isinstance(data.get("events"), list):
        return None
    return data


def zip_json(location: str, name: str, limit: float | None = None,
             stamp: tuple[Any, Any] | None = None) -> Any:
    """A JSON document stored in a local ``.eval`` zip, or ``None`` (not there, not a
    local ``.eval``, or unreadable: the caller then asks Inspect's reader).

    An ``.eval`` log is a zip of JSON documents (zstd-compressed in newer versions;
    the ``zipfile-zstd`` package Inspect depends on teaches ``zipfile`` that). An
    entry larger than ``limit`` (default :data:`~watcher.limits.LOG_ENTRY_SIZE`)
    raises :class:`EntryTooLarge`: Inspect's reader would inflate it whole.
    """
    blob = zip_bytes(location, name, limit, stamp)
    return None if blob is None else json_or_none(blob)


def json_or_none(blob: bytes) -> Any:
    """A stored JSON document decoded, or ``None`` where orjson refuses it (NaN, huge
    integers: Inspect's reader then reads the sample)."""
    try:
        return loads(blob)
    except ValueError:
        return None


def zip_bytes(location: str, name: str, limit: float | None = None,
              stamp: tuple[Any, Any] | None = None) -> bytes | None:
    """The bytes of an entry of a local ``.eval`` zip, or ``None`` (as :func:`zip_json`;
    over ``limit``, :class:`EntryTooLarge`)."""
    path = local_path(location)
    if path is None or not path.endswith(".eval"):
        return None
    if limit is None:
        limit = limits.LOG_ENTRY_SIZE.value()
    try:
        import zipfile

        try:
            import zipfile_zstd  # noqa: F401  (registers zstd with zipfile)
        except ImportError:
            pass
        return open_zip(path, stamp).read(name, limit)
    except (OSError, KeyError, ValueError, NotImplementedError, RuntimeError,
            zipfile.BadZipFile):
        return None


def zip_entry_size(location: str, name: str, limit: float) -> None:
    """Raise :class:`EntryTooLarge` if a local ``.eval``'s entry is over ``limit``."""
    path = local_path(location)
    if path is None or not path.endswith(".eval"):
        return
    try:
        size = open_zip(path).size(name)
    except Exception:  # noqa: BLE001 - not there, not a zip: Inspect's reader says so
        return
    if size > limit:
        raise EntryTooLarge(name, size, limit)
