"""Reporters: render findings, notices and status for people and machines.

A reporter is a :class:`~watcher.reporters.base.Reporter`: it receives immutable
values (findings, notices, :mod:`watcher.summary`'s snapshots and summaries) and only
renders them. :mod:`~watcher.reporters.registry` finds one by name for ``watch
--format`` and ``report --format``: ``REPORTERS`` (the built-in ones) and those other
packages register under the entry point group ``inspect_watch.reporters``; each is
opened with :meth:`~watcher.reporters.base.Reporter.open`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from watcher.reporters.base import OutputError, OutputOptions, Reporter, find_outliers
from watcher.reporters.registry import BUILTIN as REPORTERS
from watcher.reporters.registry import ENTRY_POINT_GROUP, ReporterError, get_reporter
from watcher.summary import (
    ReportContext,
    RunSummary,
    SampleSummary,
    StatusSnapshot,
    TaskStatus,
    TaskSummary,
    fold_findings,
)

if TYPE_CHECKING:
    from watcher.reporters.html import HtmlReporter, render_html
    from watcher.reporters.jsonl import (
        JsonlReporter,
        merge_findings,
        read_jsonl,
        summary_from_jsonl,
    )
    from watcher.reporters.markdown import MarkdownReporter, render_markdown
    from watcher.reporters.text import TextReporter

# the renderers, imported on first use (PEP 562): a watch writes one format, and the
# HTML one alone took ~30 ms to import (watcher.reporters.registry)
_LAZY = {
    "HtmlReporter": "html", "render_html": "html",
    "JsonlReporter": "jsonl", "merge_findings": "jsonl", "read_jsonl": "jsonl",
    "summary_from_jsonl": "jsonl",
    "MarkdownReporter": "markdown", "render_markdown": "markdown",
    "TextReporter": "text",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


__all__ = [
    "ENTRY_POINT_GROUP",
    "REPORTERS",
    "HtmlReporter",
    "JsonlReporter",
    "MarkdownReporter",
    "OutputError",
    "OutputOptions",
    "ReportContext",
    "Reporter",
    "ReporterError",
    "RunSummary",
    "SampleSummary",
    "StatusSnapshot",
    "TaskStatus",
    "TaskSummary",
    "TextReporter",
    "find_outliers",
    "fold_findings",
    "get_reporter",
    "merge_findings",
    "read_jsonl",
    "render_html",
    "render_markdown",
    "summary_from_jsonl",
]
