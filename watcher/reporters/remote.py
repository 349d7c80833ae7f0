"""JSONL findings to a shared location through fsspec (``--output s3://…/host-a.jsonl``).

Object stores cannot append, so the reporter appends to a local spool file (with
the same one-write-per-line guarantee as :class:`JsonlReporter`) and uploads the
whole spool to the URL at most every ``every`` seconds and at stop. One watcher
per host writes its own object; ``inspect-watch report`` merges them.
"""

from __future__ import annotations

import os
import tempfile
import time

from watcher.findings import Finding, Notice
from watcher.reporters.base import Reporter, RunContext, RunSummary, StatusSnapshot
from watcher.reporters.jsonl import JsonlReporter


def is_url(path: str) -> bool:
    """``scheme://…`` other than a plain local ``file://`` path."""
    return "://" in path and not path.startswith("file://")


class RemoteJsonlReporter(Reporter):
    """Spool locally, upload the whole JSONL to ``url`` periodically and at stop."""

    name = "jsonl-remote"

    def __init__(self, url: str, *, full_evidence: bool = False, every: float = 10.0) -> None:
        self.url = url
        self.every = every
        fd, self.spool = tempfile.mkstemp(prefix="inspect-watch-", suffix=".jsonl")
        os.close(fd)
        self._local = JsonlReporter(self.spool, full_evidence=full_evidence)
        self._dirty = False
        self._last_upload = 0.0
        self.uploads = 0

    def start(self, context: RunContext) -> None:
        self._local.start(context)

    def finding(self, f: Finding) -> None:
        self._local.finding(f)
        self._dirty = True
        self._maybe_upload()

    def notice(self, n: Notice) -> None:
        self._local.notice(n)
        self._dirty = True
        self._maybe_upload()

    def status(self, snapshot: StatusSnapshot) -> None:
        self._maybe_upload()

    def _maybe_upload(self, force: bool = False) -> None:
        if not self._dirty or (not force and time.time() - self._last_upload < self.every):
            return
        import fsspec

        with open(self.spool, "rb") as src, fsspec.open(self.url, "wb") as dst:
            dst.write(src.read())
        self._dirty = False
        self._last_upload = time.time()
        self.uploads += 1

    def stop(self, summary: RunSummary | None = None) -> None:
        self._local.stop(summary)
        self._maybe_upload(force=True)
        try:
            os.unlink(self.spool)
        except OSError:
            pass

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"RemoteJsonlReporter({self.url!r})"
