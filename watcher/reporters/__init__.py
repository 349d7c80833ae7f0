"""Reporters: render findings, notices and status for people and machines.

``REPORTERS`` maps the names accepted on the command line to reporter classes;
each class takes its output (a stream and/or path) plus options as keyword
arguments. See :class:`~watcher.reporters.base.Reporter` for the lifecycle.
"""

from __future__ import annotations

from watcher.reporters.base import Reporter, find_outliers
from watcher.reporters.html import HtmlReporter, render_html
from watcher.reporters.jsonl import (
    JsonlReporter,
    merge_findings,
    read_jsonl,
    summary_from_jsonl,
)
from watcher.reporters.markdown import MarkdownReporter, render_markdown
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

REPORTERS: dict[str, type[Reporter]] = {
    "text": TextReporter,
    "jsonl": JsonlReporter,
    "markdown": MarkdownReporter,
    "html": HtmlReporter,
}

__all__ = [
    "REPORTERS",
    "HtmlReporter",
    "JsonlReporter",
    "MarkdownReporter",
    "ReportContext",
    "Reporter",
    "RunSummary",
    "SampleSummary",
    "StatusSnapshot",
    "TaskStatus",
    "TaskSummary",
    "TextReporter",
    "find_outliers",
    "fold_findings",
    "merge_findings",
    "read_jsonl",
    "render_html",
    "render_markdown",
    "summary_from_jsonl",
]
