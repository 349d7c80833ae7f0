"""Reporters: render findings, notices and status for people and machines.

A reporter is a :class:`~watcher.reporters.base.Reporter`: it receives immutable
values (findings, notices, :mod:`watcher.summary`'s snapshots and summaries) and only
renders them. :mod:`~watcher.reporters.registry` finds one by name for ``watch
--format`` and ``report --format``: ``REPORTERS`` (the built-in ones) and those other
packages register under the entry point group ``inspect_watch.reporters``; each is
opened with :meth:`~watcher.reporters.base.Reporter.open`.
"""

from __future__ import annotations

from watcher.reporters.base import OutputError, OutputOptions, Reporter, find_outliers
from watcher.reporters.html import HtmlReporter, render_html
from watcher.reporters.jsonl import (
    JsonlReporter,
    merge_findings,
    read_jsonl,
    summary_from_jsonl,
)
from watcher.reporters.markdown import MarkdownReporter, render_markdown
from watcher.reporters.registry import BUILTIN as REPORTERS
from watcher.reporters.registry import ENTRY_POINT_GROUP, ReporterError, get_reporter
from watcher.reporters.text import TextReporter
from watcher.summary import (
    ReportContext,
    RunSummary,
    SampleSummary,
    StatusSnapshot,
    TaskStatus,
    TaskSummary,
    fold_findings,
)

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
