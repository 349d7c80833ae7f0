"""Findings to a shared location through fsspec (``--output s3://…/host-a.jsonl``).

Object stores cannot append, so :class:`RemoteReporter` has a local reporter (the
JSONL one: :meth:`JsonlReporter.open <watcher.reporters.jsonl.JsonlReporter.open>`
for a URL) append to a spool file, with that reporter's own guarantees (one write per
line), and uploads the whole spool to the URL at most every ``every`` seconds and at
stop. One watcher per host writes its own object; ``inspect-watch report`` merges them.

A URL that cannot be written at the start (no credentials, no bucket) stops the watch
before it begins. A failed upload later (the network) never stops the watch: it is
said on stderr, retried at the next upload, and if the last one fails the spool file is
kept and named, so no finding is lost.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Callable

from watcher.findings import Finding, Notice
from watcher.reporters.base import OutputError, Reporter
from watcher.summary import ReportContext, RunSummary, StatusSnapshot


def is_url(path: str) -> bool:
    """``scheme://…`` other than a plain local ``file://`` path."""
    return "://" in path and not path.startswith("file://")


class RemoteReporter(Reporter):
    """Spool locally with ``local(spool_path)``, upload the whole spool to ``url``
    periodically and at stop."""

    name = "remote"

    def __init__(self, url: str, local: Callable[[str], Reporter], *, every: float = 10.0,
                 suffix: str = ".jsonl") -> None:
        self.url = url
        self.every = every
        fd, self.spool = tempfile.mkstemp(prefix="inspect-watch-", suffix=suffix)
        os.close(fd)
        self._local = local(self.spool)
        self._dirty = False
        self._last_upload = 0.0
        self.uploads = 0
        self.error: str | None = None  # the last upload's failure, while it lasts

    def start(self, context: ReportContext) -> None:
        self._local.start(context)
        try:  # an empty object now: a URL that cannot be written fails before the watch
            self._upload()
        except Exception as e:  # noqa: BLE001 - fsspec backends raise their own types
            os.unlink(self.spool)
            raise OutputError(f"cannot write {self.url}: {_why(e)}") from e

    def finding(self, f: Finding) -> None:
        self._local.finding(f)
        self._dirty = True
        self._maybe_upload()

    def update(self, f: Finding) -> None:
        self._local.update(f)
        self._dirty = True
        self._maybe_upload()

    def notice(self, n: Notice) -> None:
        self._local.notice(n)
        self._dirty = True
        self._maybe_upload()

    takes_status = True  # each snapshot is a chance to upload

    def status(self, snapshot: StatusSnapshot) -> None:
        self._maybe_upload()

    def _maybe_upload(self, force: bool = False) -> None:
        if not self._dirty or (not force and time.time() - self._last_upload < self.every):
            return
        self._last_upload = time.time()  # a failure waits ``every`` seconds too
        try:
            self._upload()
        except Exception as e:  # noqa: BLE001 - fsspec backends raise their own types
            if self.error is None:  # once per outage, not once per finding
                _warn(f"could not upload findings to {self.url} ({_why(e)}); they are "
                      f"kept in {self.spool} and the upload is retried")
            self.error = _why(e)
            return
        if self.error is not None:
            _warn(f"findings uploaded to {self.url} again")
        self.error = None
        self._dirty = False

    def _upload(self) -> None:
        import fsspec

        with open(self.spool, "rb") as src, fsspec.open(self.url, "wb") as dst:
            dst.write(src.read())
        self.uploads += 1

    def stop(self, summary: RunSummary | None = None) -> None:
        self._local.stop(summary)
        self._maybe_upload(force=True)
        if self._dirty:  # the last upload failed: the spool is the only copy
            _warn(f"the findings were not uploaded to {self.url} ({self.error}); "
                  f"they are in {self.spool}")
            return
        try:
            os.unlink(self.spool)
        except OSError:
            pass

    @property
    def lost(self) -> bool:
        """The findings did not reach the URL (they are in the spool file)."""
        return self._dirty

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"RemoteReporter({self.url!r})"


def _why(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__


def _warn(message: str) -> None:
    print(f"inspect-watch: {message}", file=sys.stderr, flush=True)
