"""The watchdog's audit: an ``action`` record for every step it takes, in the server's
words (bounded: they are untrusted data), and what was done for each finding and near
it, for the hand-offs."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

from watcher.act.policy import ActSpec
from watcher.act.verbs import scope_of
from watcher.findings import Action, Finding, Notice, SampleRef
from watcher.reporters.formatting import fmt_clock
from watcher.sources.http import ControlAnswer

ANSWER_MAX = 2000  # characters of the server's words kept in an answer's strings


class Records:
    """Records written since the routing thread last took them (:meth:`take`), and each
    finding's and target's lines of what was done."""

    def __init__(self, mode: str, clock: Callable[[], float]) -> None:
        self.mode = mode
        self.clock = clock
        self._lock = threading.Lock()
        self._records: list[Notice] = []
        self._done: dict[str, list[str]] = {}  # finding id -> what was done, in words
        # target (sample, task or run; see targets) -> the same, for its other findings
        self._around: dict[str, list[str]] = {}

    def record(self, f: Finding, spec: ActSpec | None, outcome: str, message: str, *,
               reason: str | None = None, dry: ControlAnswer | None = None,
               real: ControlAnswer | None = None, scope: str | None = None,
               verb: str | None = None, args: dict[str, Any] | None = None,
               **details: Any) -> Action:
        """An action record about ``f`` (not yet written: see :meth:`emit`)."""
        verb = verb or (spec.verb if spec is not None else "")
        if scope is None:
            scope = scope_of(verb)
        record = Action(
            message=message, sample=f.sample, at=self.clock(), details=details, verb=verb,
            args=dict(args if args is not None else (spec.args if spec else {})),
            outcome=outcome, reason=reason, mode=self.mode, scope=scope, finding_id=f.id,
            rule=f.rule, confidence=f.confidence, dry_run_answer=answer(dry),
            server_answer=answer(real))
        line = (f"{fmt_clock(record.at)} {verb.replace('_', ' ')}: "
                f"{outcome.replace('_', '-')}: {message}")
        with self._lock:
            self._done.setdefault(f.id, []).append(line)
            for key in targets(f.sample, scope):
                self._around.setdefault(key, []).append(line)
        return record

    def emit(self, f: Finding, spec: ActSpec | None, outcome: str, message: str,
             **kw: Any) -> None:
        """Write an action record with the others."""
        self.add([self.record(f, spec, outcome, message, **kw)])

    def add(self, notices: Iterable[Notice]) -> None:
        with self._lock:
            self._records += notices

    def take(self) -> list[Notice]:
        """The records written since the last call."""
        with self._lock:
            out, self._records = self._records, []
        return out

    def done(self, finding_id: str) -> list[str]:
        """What was done about the finding, one line each."""
        with self._lock:
            return list(self._done.get(finding_id, ()))

    def around(self, s: SampleRef) -> list[str]:
        """What was done about the sample's other findings, its task's and its run's."""
        with self._lock:
            return list(dict.fromkeys(line for key in targets(s, "run")
                                      for line in self._around.get(key, ())))


def targets(s: SampleRef, scope: str) -> list[str]:
    """What an action of ``scope`` about sample ``s`` touched (its sample; for a task
    or run scope, that too); for a finding, ``scope="run"`` gives every key it shares."""
    keys = [f"sample:{s.eval_id}:{s.sample_id}:{s.epoch}"]
    if scope in ("task", "run"):
        keys.append(f"task:{s.task_id or s.eval_id}")
    if scope == "run" and s.pid is not None:
        keys.append(f"run:{s.pid}")
    return keys


def answer(ans: ControlAnswer | None) -> dict[str, Any] | None:
    """An answer as the record keeps it: status and body, bounded (untrusted data)."""
    if ans is None:
        return None
    return {"status": ans.status, "body": _bounded(ans.body)}


def _bounded(value: Any, depth: int = 0) -> Any:
    if depth > 5:
        return "…"
    if isinstance(value, str):
        return value if len(value) <= ANSWER_MAX else value[:ANSWER_MAX] + "…"
    if isinstance(value, dict):
        return {str(k)[:200]: _bounded(v, depth + 1) for k, v in list(value.items())[:50]}
    if isinstance(value, list):
        return [_bounded(v, depth + 1) for v in value[:50]]
    if value is None or isinstance(value, bool | int | float):
        return value
    return str(value)[:ANSWER_MAX]
