"""One action on its way: a finding episode (or a run) and where it stands.

Made when the policy's block for a finding applies (step 1 of
:mod:`watcher.act.watchdog`); each later step reads and moves it on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from watcher.act.policy import ActSpec
from watcher.discovery import ControlServer
from watcher.findings import Finding


@dataclass
class Pending:
    """``key`` is the finding id, or ``run:<pid>`` for a run's interrupt (``spec``
    ``None``); the grace runs from ``since``."""

    key: str
    finding: Finding
    server: ControlServer
    spec: ActSpec | None
    since: float  # when its conditions first held
    ready: bool = True  # its `when` facts hold
    events0: int | None = None
    checks: int = 0  # checks since the grace was met (1: the first), failed ones too
    phase: str = "grace"  # grace | confirm
    requested_at: float = 0.0
    failures: int = 0
    counted: bool = False  # counted against --act-max / --act-max-task
    args: dict[str, Any] = field(default_factory=dict)
    asked: bool = False  # someone asked to act now (Watchdog.expedite): no grace
