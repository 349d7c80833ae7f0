"""The finding: one immutable value every reporter renders from.

A finding is one episode of one rule on one sample attempt. The engine keeps a
mutable record per episode and emits a new :class:`Finding` snapshot each time a
reporter should hear about it (new, escalated, ended); snapshots of one episode
share ``id`` so JSONL consumers can fold them. ``to_dict`` is the only
serialisation (schema version :data:`SCHEMA`), documented in docs/findings.md.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, fields
from typing import Any, Literal, TypeVar

SCHEMA = 1

_T = TypeVar("_T")

Confidence = Literal["low", "medium", "high"]
Severity = Literal["info", "warning", "critical"]
Status = Literal["open", "escalated", "ended"]

CONFIDENCE_LEVELS: tuple[Confidence, ...] = ("low", "medium", "high")

# facts the watch attaches to every finding, outside the rules (watcher/run/spend.py):
# what the sample spent after the finding was first seen, and after it became high
SPEND_FACTS = ("tokens_since_first_seen", "tokens_since_high", "cost_since_first_seen")
# why those figures are null (or count only part of the calls): never a false zero
SPEND_NOT_COUNTED = "spend_not_counted"
# categories of findings that spend a budget doing the same thing again (loops): the
# summary says what a run spent after its first high one
LOOP_CATEGORIES = frozenset({"submit_loop", "repeated_tool_call", "narration_loop"})
SEVERITY_LEVELS: tuple[Severity, ...] = ("info", "warning", "critical")


def confidence_rank(level: str) -> int:
    """Order of confidence levels (``low`` < ``medium`` < ``high``)."""
    return CONFIDENCE_LEVELS.index(level)  # type: ignore[arg-type]


@dataclass(frozen=True)
class SampleRef:
    """Which sample attempt a finding or notice is about."""

    task: str
    task_id: str
    eval_id: str
    model: str
    sample_id: str
    epoch: int
    attempt: int = 1
    log_location: str | None = None
    pid: int | None = None

    def as_dict(self) -> dict[str, Any]:
        """Its fields as a plain dict (``dataclasses.asdict`` deep-copies, slowly: every
        sample a watch opens builds one)."""
        return {name: getattr(self, name) for name in _REF_FIELDS}

    @property
    def key(self) -> tuple[str, str, int]:
        """Identity of the sample across attempts."""
        return (self.eval_id, self.sample_id, self.epoch)


_REF_FIELDS = tuple(f.name for f in fields(SampleRef))


@dataclass(frozen=True)
class Evidence:
    """What a finding rests on. ``excerpts`` hold agent-written (untrusted) text."""

    event_uuids: tuple[str, ...] = ()
    timestamps: tuple[float, ...] = ()
    excerpts: tuple[str, ...] = ()
    facts: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "event_uuids": list(self.event_uuids),
            "timestamps": list(self.timestamps),
            "agent_text": list(self.excerpts),
            "facts": dict(self.facts),
        }


@dataclass(frozen=True)
class Finding:
    """A snapshot of one rule episode on one sample attempt."""

    id: str
    rule: str
    title: str
    category: str
    severity: Severity
    confidence: Confidence
    score: float
    confidence_reason: str
    sample: SampleRef
    summary: str
    evidence: Evidence
    first_seen: float
    last_seen: float
    count: int
    status: Status
    handoff: str
    episode: int = 1
    # what can be done about it, as data (watcher.handoff.finding_actions): set by the
    # watch with the hand-off; each a JSON object (docs/findings.md "actions")
    actions: tuple[dict[str, Any], ...] = ()

    def sort_key(self) -> tuple[Any, ...]:
        """Stable order: by time, then sample, then rule."""
        return (self.first_seen, self.sample.key, self.sample.attempt, self.rule, self.episode)

    def to_dict(self) -> dict[str, Any]:
        """The JSONL record (schema 1)."""
        s = self.sample
        return {
            "schema": SCHEMA,
            "kind": "finding",
            "id": self.id,
            "rule": self.rule,
            "title": self.title,
            "category": self.category,
            "severity": self.severity,
            "confidence": self.confidence,
            "score": round(self.score, 3),
            "confidence_reason": self.confidence_reason,
            "task": s.task,
            "task_id": s.task_id,
            "eval_id": s.eval_id,
            "model": s.model,
            "sample_id": s.sample_id,
            "epoch": s.epoch,
            "attempt": s.attempt,
            "log_location": s.log_location,
            "pid": s.pid,
            "summary": self.summary,
            "evidence": self.evidence.to_dict(),
            "first_seen": self.first_seen,
            "last_seen": self.last_seen,
            "count": self.count,
            "status": self.status,
            "episode": self.episode,
            "handoff": self.handoff,
            "actions": [dict(a) for a in self.actions],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Finding:
        """Inverse of :meth:`to_dict` (for ``report`` over JSONL files)."""
        ev = d.get("evidence") or {}
        return cls(
            id=d["id"], rule=d["rule"], title=d.get("title", d["rule"]),
            category=d.get("category", ""), severity=d.get("severity", "warning"),
            confidence=d.get("confidence", "low"), score=float(d.get("score", 0.0)),
            confidence_reason=d.get("confidence_reason", ""),
            sample=SampleRef(
                task=d.get("task", ""), task_id=d.get("task_id", ""),
                eval_id=d.get("eval_id", ""), model=d.get("model", ""),
                sample_id=str(d.get("sample_id", "")), epoch=int(d.get("epoch", 1)),
                attempt=int(d.get("attempt", 1)), log_location=d.get("log_location"),
                pid=d.get("pid") if type(d.get("pid")) is int else None,
            ),
            summary=d.get("summary", ""),
            evidence=Evidence(
                event_uuids=tuple(ev.get("event_uuids", ())),
                timestamps=tuple(ev.get("timestamps", ())),
                excerpts=tuple(ev.get("agent_text", ())),
                facts=dict(ev.get("facts", {})),
            ),
            first_seen=float(d.get("first_seen", 0.0)), last_seen=float(d.get("last_seen", 0.0)),
            count=int(d.get("count", 1)), status=d.get("status", "open"),
            handoff=d.get("handoff", ""), episode=int(d.get("episode", 1)),
            actions=tuple(dict(a) for a in d["actions"] if isinstance(a, dict))
            if isinstance(d.get("actions"), list) else (),
        )


def built(cls: type[_T], values: dict[str, Any]) -> _T:
    """``cls(**values)`` for a frozen dataclass, without its ``__init__``.

    A frozen dataclass sets each field through ``object.__setattr__``: for a
    :class:`Finding` and its :class:`Evidence` that is about 10 µs, for every snapshot
    the engine emits. Filling the instance dictionary at once gives the same object
    (equal, pickled and printed alike). ``values`` must name every field, as the
    engine's snapshot does (tests/engine/test_engine.py checks it).
    """
    obj = object.__new__(cls)
    obj.__dict__.update(values)
    return obj


def finding_id(rule: str, sample: SampleRef, episode: int) -> str:
    """Deterministic id: the same episode gets the same id live, post-hoc and after restart."""
    basis = f"{rule}|{sample.eval_id}|{sample.sample_id}|{sample.epoch}|{sample.attempt}|{episode}"
    return hashlib.sha256(basis.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Notice:
    """Something the watcher itself reports: coverage gaps, processes gone, errors."""

    kind: str  # e.g. "gap", "process_gone", "source_error", "attempt" (docs/findings.md)
    message: str
    sample: SampleRef | None = None
    at: float = 0.0
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"schema": SCHEMA, "kind": "notice", "notice": self.kind,
                               "message": self.message, "at": self.at,
                               "details": dict(self.details)}
        if self.sample is not None:
            out["sample"] = self.sample.as_dict()
        return out


ACTION = "action"  # the ``kind`` of an action record (a Notice subclass, see below)
# what became of one action of the watchdog (``inspect-watch watch --act``)
ACTION_OUTCOMES = ("requested", "dry_run", "skipped", "unsupported", "failed", "confirmed",
                   "unconfirmed")


@dataclass(frozen=True, kw_only=True)
class Action(Notice):
    """An audit record of the watchdog: one action attempted, skipped or failed.

    It travels as a :class:`Notice` (what a :class:`~watcher.run.router.Decider` returns
    reaches every sink as one), and is written as its own JSONL line (``kind:
    "action"``, docs/findings.md "Action lines"). ``message`` says what the server
    answered and nothing more: "cancel requested; the server accepted it" is not "the
    sample was cancelled" until the listing shows it (outcome ``confirmed``).
    ``dry_run_answer`` and ``server_answer`` hold the server's answers as it gave them
    (``{"status", "body"}``): untrusted data.
    """

    kind: str = ACTION
    message: str = ""
    verb: str = ""  # cancel_sample | cancel_tool_call | drain_task | pause_task | interrupt_run
    args: dict[str, Any] = field(default_factory=dict)
    outcome: str = "skipped"  # one of ACTION_OUTCOMES
    reason: str | None = None  # why it was skipped or failed (a stable code)
    mode: str = "act"  # act | dry-run
    scope: str = "sample"  # tool_call | sample | task | run
    finding_id: str = ""
    rule: str = ""
    confidence: str = ""
    dry_run_answer: dict[str, Any] | None = None
    server_answer: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSONL record (schema 1, ``kind: "action"``)."""
        s = self.sample
        target: dict[str, Any] = (
            {k: getattr(s, k) for k in ("task", "task_id", "eval_id", "model", "sample_id",
                                        "epoch", "attempt", "pid", "log_location")}
            if s is not None else {})
        return {"schema": SCHEMA, "kind": ACTION, "verb": self.verb, "args": dict(self.args),
                "outcome": self.outcome, "reason": self.reason, "mode": self.mode,
                "scope": self.scope, "message": self.message, "finding_id": self.finding_id,
                "rule": self.rule, "confidence": self.confidence, **target,
                "dry_run_answer": self.dry_run_answer, "server_answer": self.server_answer,
                "at": self.at, "details": dict(self.details)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Action:
        """Inverse of :meth:`to_dict` (for ``report`` over JSONL files)."""
        sample = None
        if d.get("eval_id") is not None or d.get("task") is not None:
            sample = SampleRef(
                task=str(d.get("task") or ""), task_id=str(d.get("task_id") or ""),
                eval_id=str(d.get("eval_id") or ""), model=str(d.get("model") or ""),
                sample_id=str(d.get("sample_id") or ""), epoch=int(d.get("epoch") or 1),
                attempt=int(d.get("attempt") or 1), log_location=d.get("log_location"),
                pid=d.get("pid") if isinstance(d.get("pid"), int) else None)
        return cls(message=str(d.get("message") or ""), sample=sample,
                   at=float(d.get("at") or 0.0), details=dict(d.get("details") or {}),
                   verb=str(d.get("verb") or ""), args=dict(d.get("args") or {}),
                   outcome=str(d.get("outcome") or "skipped"),
                   reason=None if d.get("reason") is None else str(d["reason"]),
                   mode=str(d.get("mode") or "act"), scope=str(d.get("scope") or "sample"),
                   finding_id=str(d.get("finding_id") or ""), rule=str(d.get("rule") or ""),
                   confidence=str(d.get("confidence") or ""),
                   dry_run_answer=d.get("dry_run_answer") if isinstance(
                       d.get("dry_run_answer"), dict) else None,
                   server_answer=d.get("server_answer") if isinstance(
                       d.get("server_answer"), dict) else None)
