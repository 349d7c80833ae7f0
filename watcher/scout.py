"""The rule pack over Inspect Scout transcripts (the ``inspect_watch/rules`` scanner).

Scout hands a scanner one finished transcript at a time, as its own pydantic types. To
find there exactly what ``inspect-watch watch --log-dir`` finds in the same sample, a
transcript goes the way a logged sample goes: its events are dumped to the raw dicts a
log holds (attachments are resolved by Scout already), read through the same
:class:`~watcher.stream.SampleStream` (pages, de-duplication, pending events, the
rules' event types, normalised at the engine's tier), and the sample rules see the
log's listing row and its task context, built as the watch builds them.

What cannot apply to a finished transcript is left out, and said so: clock-driven rules
(the ``idle`` detector: stalled samples) need a clock that is still running, and
nobody is there to act on a hand-off. Everything else is the library's: ``load_rules``,
``Engine``, ``SampleWatch``, ``Finding``.

This module never imports ``inspect_scout`` at import time; :func:`scan_results` does,
when it builds Scout's ``Result`` values.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from inspect_ai._util.error import PrerequisiteError

from watcher.engine import (
    Engine,
    RuleLoadErrors,
    RuleSet,
    RunContext,
    load_rules,
    load_suppressions,
)
from watcher.events import TIERS, Tier
from watcher.findings import CONFIDENCE_LEVELS, Finding, SampleRef, confidence_rank
from watcher.sanitize import md_code
from watcher.sources.base import (
    EventPage,
    SampleListing,
    SampleRow,
    Source,
    SourceError,
    TaskInfo,
    decode_cursor,
    encode_cursor,
)
from watcher.stream import SampleStream

logger = logging.getLogger(__name__)

SCANNER_NAME = "inspect_watch/rules"
# the boolean form: one yes/no row per transcript, for tools that read only booleans
# (Inspect Steward escalates a scanner's `true` rows, and passes over every other value)
FLAG_SCANNER_NAME = "inspect_watch/rules_flag"
# its default floor: `medium` is "look before acting" (README); a `true` row opens an
# anomaly that someone must rule on, and `low` ("read the transcript before believing
# it") would open one for every weak inference
FLAG_MIN_CONFIDENCE = "medium"
SEVERITY_RANK = {"info": 0, "warning": 1, "critical": 2}

# the detectors that run on a clock rather than on events (SampleWatch.tick)
CLOCK_DETECTORS = frozenset({"idle"})
CLOCK_REASON = ("clock-driven (it fires when a running sample stops moving): a finished "
                "transcript has no clock to run it against")

# the watch's page size (RunOptions.page_limit): the stream de-duplicates within a poll
PAGE_LIMIT = 500
# agent-derived values quoted in a Result's explanation are cut to this many characters
QUOTE_LEN = 80
# logs whose listing (rows and task) is kept, per process
LISTING_CACHE = 8


class ScannerArgsError(PrerequisiteError, ValueError):
    """A scanner argument (``-S``) we cannot use, or invalid rules: Scout and Inspect print
    a ``PrerequisiteError``'s message alone, without a traceback, and stop."""

    def __init__(self, message: str) -> None:
        from rich.markup import escape

        super().__init__(escape(message))  # printed through rich: `[rule x]` is no markup
        self.args = (message,)


@dataclass(frozen=True)
class ScanOptions:
    """The scanner's arguments, as ``watch`` takes them (hashable: engines are cached)."""

    rules: tuple[str, ...] = ()
    only: tuple[str, ...] = ()
    disable: tuple[str, ...] = ()
    needs: str | None = None
    builtin: bool = True
    suppress: str | None = None
    min_confidence: str = "low"

    @classmethod
    def of(cls, rules: str | Sequence[str] | None = None,
           only: str | Sequence[str] | None = None,
           disable: str | Sequence[str] | None = None, needs: str | None = None,
           builtin: bool = True, suppress: str | None = None,
           min_confidence: str = "low") -> ScanOptions:
        """Options from scanner arguments: a string or a list each (``-S only=a,b`` or
        ``-S 'only=[a, b]'``); rule and suppress paths made absolute, so Scout's worker
        processes find them wherever they run."""
        if needs is not None and needs not in TIERS:
            raise ScannerArgsError(f"needs={needs!r}: expected one of {', '.join(TIERS)}")
        if min_confidence not in CONFIDENCE_LEVELS:
            raise ScannerArgsError(f"min_confidence={min_confidence!r}: expected one of "
                                   + ", ".join(CONFIDENCE_LEVELS))
        if not isinstance(builtin, bool):
            raise ScannerArgsError(f"builtin={builtin!r}: expected true or false")
        return cls(rules=tuple(os.path.abspath(p) for p in _strings(rules, "rules", split=False)),
                   only=_strings(only, "only"), disable=_strings(disable, "disable"),
                   needs=needs, builtin=builtin,
                   suppress=os.path.abspath(suppress) if suppress else None,
                   min_confidence=min_confidence)


def _strings(value: str | Sequence[str] | None, name: str, split: bool = True) -> tuple[str, ...]:
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, Sequence) or not all(isinstance(v, str) for v in items):
        raise ScannerArgsError(f"{name}={value!r}: expected a string or a list of strings")
    if split:
        return tuple(p.strip() for v in items for p in v.split(",") if p.strip())
    return tuple(items)


@dataclass
class Pack:
    """The compiled rules for one set of options, and what was left out of them."""

    engine: Engine
    ruleset: RuleSet
    clock_skipped: dict[str, str] = field(default_factory=dict)


@lru_cache(maxsize=8)
def rule_pack(opts: ScanOptions) -> Pack:
    """Load and compile the rules (raises :class:`RuleLoadErrors`); once per process and
    options, so a scan compiles them once, not once per transcript."""
    ruleset = load_rules(paths=list(opts.rules), builtin=opts.builtin,
                         disable=list(opts.disable), only=list(opts.only),
                         needs_max=opts.needs)
    suppressions = load_suppressions(opts.suppress) if opts.suppress else []
    clock = {r.id: CLOCK_REASON for r in ruleset.rules if r.detect_kind in CLOCK_DETECTORS}
    engine = Engine([r for r in ruleset.rules if r.id not in clock], suppressions)
    return Pack(engine, ruleset, clock)


def check_rules(opts: ScanOptions) -> Pack:
    """:func:`rule_pack`, with invalid rules as one readable error (file:line:col each)."""
    try:
        return rule_pack(opts)
    except RuleLoadErrors as e:
        raise ScannerArgsError("inspect-watch rules are invalid:\n" + e.render()) from None


# -- the listing row and task context of a logged sample ------------------------------


@dataclass
class _Listing:
    """A log's task and listing rows, in the order the watch lists them."""

    task: TaskInfo
    rows: list[SampleRow]
    index: dict[tuple[str, int], int]


_LISTINGS: OrderedDict[tuple[str, Any], _Listing | None] = OrderedDict()
_LISTINGS_LOCK = threading.Lock()


def _stamp(location: str) -> Any:
    path = location[len("file://"):] if location.startswith("file://") else location
    if "://" in path:
        return None  # a remote log: finished logs do not change under a scan
    try:
        st = os.stat(path)
    except OSError:
        return False
    return (st.st_size, st.st_mtime_ns)


def _listing(location: str) -> _Listing | None:
    """The finished log's listing, or ``None`` (not readable, not one task, still running:
    ``inspect eval --scanner`` scans each sample while its log is being written)."""
    key = (location, _stamp(location))
    with _LISTINGS_LOCK:
        if key in _LISTINGS:
            _LISTINGS.move_to_end(key)
            return _LISTINGS[key]
    listing = _read_listing(location)
    with _LISTINGS_LOCK:
        _LISTINGS[key] = listing
        while len(_LISTINGS) > LISTING_CACHE:
            _LISTINGS.popitem(last=False)
    return listing


def _read_listing(location: str) -> _Listing | None:
    from watcher.sources.logfiles import LogSource

    source = LogSource(location, cache_size=1)
    try:
        tasks = source.tasks()
        if len(tasks) != 1 or not tasks[0].finished:
            return None
        rows = source.samples(tasks[0]).samples
    except (SourceError, OSError, ValueError) as e:
        logger.info("inspect-watch: %s: no listing (%s); sample rules see the transcript "
                    "alone", location, e)
        return None
    finally:
        source.close()
    return _Listing(tasks[0], rows, {(r.sample_id, r.epoch): i for i, r in enumerate(rows)})


def _row_dict(row: SampleRow) -> dict[str, Any]:
    """A listing row as the watch hands it to sample rules."""
    raw = dict(row.raw or {})
    raw.setdefault("status", row.status)
    raw.setdefault("retries", row.retries)
    raw.setdefault("sample_id", row.sample_id)
    raw.setdefault("epoch", row.epoch)
    return raw


def _context(listing: _Listing, i: int) -> RunContext:
    """The task context of row ``i`` as the watch builds it over a finished log: every
    finished sample is counted before any row is judged, and the context is complete
    when all of them are (outliers are judged against the whole task)."""
    ctx = RunContext(task=listing.task.task)
    for row in listing.rows:
        if row.terminal:
            ctx.add(row.raw)
    ctx.complete = listing.task.finished and all(r.terminal for r in listing.rows)
    return ctx


def _info_row(t: Any, sample_id: str, epoch: int) -> dict[str, Any]:
    """A listing row from Scout's transcript info, for a transcript whose log gives none."""
    error = getattr(t, "error", None)
    return {"sample_id": sample_id, "epoch": epoch,
            "status": "error" if error else "completed", "error": error,
            "retries": 0, "limit": getattr(t, "limit", None),
            "total_tokens": getattr(t, "total_tokens", None),
            "total_time": getattr(t, "total_time", None),
            "message_count": getattr(t, "message_count", None)}


# -- events ---------------------------------------------------------------------------


class _Events(Source):
    """One transcript's raw events as a :class:`~watcher.sources.base.Source` of one
    sample, paged and type-filtered as the log source pages them (the stream reads only
    :meth:`events`)."""

    name = "scout"

    def __init__(self, events: list[dict[str, Any]], nonce: str) -> None:
        self.raw = events
        self.nonce = nonce

    def tasks(self) -> list[TaskInfo]:
        return []

    def samples(self, task: TaskInfo, active_since: float | None = None,
                all_rows: bool = False) -> SampleListing:
        return SampleListing(as_of=0.0, samples=[])

    def close(self) -> None:
        return None

    def events(self, task: TaskInfo, sample_id: str, epoch: int, *, since: str | None,
               types: frozenset[str] | None, tier: Tier, limit: int = PAGE_LIMIT) -> EventPage:
        nonce, offset = decode_cursor(since)
        if nonce != self.nonce:
            offset = 0
        scanned = self.raw[offset:offset + max(1, limit)]
        end = offset + len(scanned)
        wanted = None if types is None or types & {"all", "*"} else types
        return EventPage(events=[e for e in scanned if wanted is None or e.get("event") in wanted],
                         next=encode_cursor(self.nonce, end), done=end >= len(self.raw))


def raw_events(events: Iterable[Any], tier: Tier) -> list[dict[str, Any]]:
    """Scout's events as the raw dicts the log source serves: below the ``full`` tier a
    logged sample's stored JSON (no ``None`` fields), at ``full`` Inspect's model dump."""
    out: list[dict[str, Any]] = []
    for e in events:
        if isinstance(e, dict):
            out.append(e)
        else:
            out.append(e.model_dump(mode="json", exclude_none=tier != "full"))
    return out


# -- one transcript -------------------------------------------------------------------


@dataclass
class TranscriptScan:
    """What the pack found in one transcript: each episode's final snapshot."""

    findings: list[Finding]
    ref: SampleRef
    row_from_log: bool
    clock_skipped: dict[str, str]


def scan_transcript(transcript: Any, opts: ScanOptions) -> TranscriptScan:
    """Run the pack over one Scout ``Transcript`` (or anything with its fields)."""
    pack = check_rules(opts)
    engine = pack.engine
    sample_id = str(getattr(transcript, "task_id", None) or transcript.transcript_id)
    epoch = int(getattr(transcript, "task_repeat", None) or 1)
    location = getattr(transcript, "source_uri", None)
    listing = _listing(location) if location and _is_eval_log(transcript) else None
    i = listing.index.get((sample_id, epoch)) if listing is not None else None
    if listing is not None and i is not None:
        row = listing.rows[i]
        task = listing.task
        row_dict, context = _row_dict(row), _context(listing, i)
        attempt = row.attempt
    else:
        listing = None
        task = TaskInfo(eval_id=str(getattr(transcript, "source_id", None) or ""),
                        task=str(getattr(transcript, "task_set", None) or ""),
                        task_id=str(getattr(transcript, "source_id", None) or ""),
                        model=str(getattr(transcript, "model", None) or ""),
                        status="success", log_location=location)
        row_dict = _info_row(transcript, sample_id, epoch)
        context = RunContext(task=task.task)
        context.add(row_dict)
        attempt = 1
    ref = SampleRef(task=task.task, task_id=task.task_id, eval_id=task.eval_id,
                    model=task.model, sample_id=sample_id, epoch=epoch, attempt=attempt,
                    log_location=task.log_location)

    source = _Events(raw_events(transcript.events or [], engine.tier),
                     nonce=f"{transcript.transcript_id}:{attempt}")
    stream = SampleStream(task, sample_id, epoch, types=engine.event_types, tier=engine.tier,
                          page_limit=PAGE_LIMIT)
    stream.attempt = attempt
    events: list[dict[str, Any]] = []
    # each poll reads pages until done, or re-reads from an event left pending (at most
    # MAX_PENDING_WINDOW later events); the bound only guards against a stream that stops
    for _ in range(len(source.raw) // PAGE_LIMIT + 3):
        events += stream.poll(source).events
        if stream.done:
            break
    else:
        logger.warning("inspect-watch: transcript %s: events not read to the end",
                       transcript.transcript_id)
    last = max((e["timestamp"] for e in events if isinstance(e.get("timestamp"), float)),
               default=0.0)

    watch = engine.open_sample(ref)
    snapshots: OrderedDict[str, Finding] = OrderedDict()
    # the watch's order: the listing row first, then the events, then the end
    found = watch.sample_row(row_dict, context, now=last)
    for event in events:
        found += watch.feed(event)
    found += watch.finalize(last)
    watch.release()
    for err in engine.take_errors():  # once per rule and reason, as a watch says it
        logger.warning("inspect-watch: %s", err.message)
    for f in found:
        snapshots[f.id] = f
    floor = confidence_rank(opts.min_confidence)
    final = [f for f in snapshots.values() if confidence_rank(f.confidence) >= floor]
    return TranscriptScan(final, ref, listing is not None, dict(pack.clock_skipped))


def _is_eval_log(transcript: Any) -> bool:
    kind = getattr(transcript, "source_type", None)
    return kind in (None, "eval_log")


# -- Scout results --------------------------------------------------------------------


def explanation(f: Finding, summary: str, cites: Sequence[str]) -> str:
    """The finding in our words: its :func:`our_summary`, the confidence and why, and cites
    of the events it rests on."""
    lines = [summary, f"Confidence {f.confidence}: {f.confidence_reason}"
             if f.confidence_reason else f"Confidence {f.confidence}."]
    if cites:
        lines.append("Events: " + ", ".join(cites))
    return "\n\n".join(lines)


def our_summary(f: Finding, ruleset: RuleSet) -> str:
    """The rule's message with the finding's numbers; each value taken from the transcript
    (tool names, arguments, errors, excerpts: agent-derived) as a one-line code span of at
    most :data:`QUOTE_LEN` characters, which cannot format the text or pass for ours. (The
    finding's own ``summary`` interpolates such values as they are.)"""
    rule = ruleset.get(f.rule)
    template = getattr(rule, "message", None) if rule is not None else None
    parts = getattr(template, "parts", None)
    if not parts:
        return f.title
    facts: dict[str, Any] = dict(f.evidence.facts)
    facts.setdefault("excerpt", f.evidence.excerpts[-1] if f.evidence.excerpts else "")
    facts.update(rule=f.rule, title=f.title)
    out: list[str] = []
    for is_field, text in parts:
        if not is_field:
            out.append(text)
            continue
        value = facts.get(text)
        if value is None:
            out.append("?")
        elif isinstance(value, bool):
            out.append(str(value).lower())
        elif isinstance(value, int):
            out.append(str(value))
        elif isinstance(value, float):
            out.append(f"{value:.1f}" if value != int(value) else str(int(value)))
        elif text in ("rule", "title"):
            out.append(str(value))
        else:
            out.append(md_code(str(value), QUOTE_LEN))
    return "".join(out)


def scan_results(transcript: Any, opts: ScanOptions) -> list[Any]:
    """One Scout ``Result`` per finding episode of the transcript (its final snapshot).

    ``label`` is the rule id, ``value`` the confidence, ``explanation`` our own words
    (:func:`explanation`), ``references`` the events the finding rests on; the
    finding's fields are in ``metadata``, with ``metadata.evidence`` shaped as the JSONL's
    ``evidence`` (its ``agent_text`` and string ``facts`` are untrusted).
    """
    from inspect_scout import Reference, Result

    done = scan_transcript(transcript, opts)
    ruleset = rule_pack(opts).ruleset
    position = {getattr(e, "uuid", None): n for n, e in enumerate(transcript.events or [], 1)}
    position.pop(None, None)
    results = []
    for f in done.findings:
        refs = []
        for uuid in dict.fromkeys(f.evidence.event_uuids):
            n = position.get(uuid)
            refs.append(Reference(type="event", id=uuid, cite=f"[E{n}]" if n else None))
        cites = [r.cite for r in refs if r.cite]
        summary = our_summary(f, ruleset)
        results.append(Result(
            value=f.confidence, label=f.rule, explanation=explanation(f, summary, cites),
            references=refs, metadata=_metadata(f, done, summary)))
    return results


def _metadata(f: Finding, done: TranscriptScan, summary: str) -> dict[str, Any]:
    s = f.sample
    return {
        "scanner": SCANNER_NAME, "finding_id": f.id, "rule": f.rule, "title": f.title,
        "category": f.category, "severity": f.severity, "confidence": f.confidence,
        "confidence_reason": f.confidence_reason, "score": round(f.score, 3),
        "count": f.count, "episode": f.episode, "status": f.status,
        "summary": summary, "handoff": f.handoff,
        "first_seen": f.first_seen, "last_seen": f.last_seen,
        "task": s.task, "task_id": s.task_id, "eval_id": s.eval_id, "model": s.model,
        "sample_id": s.sample_id, "epoch": s.epoch, "attempt": s.attempt,
        "log_location": s.log_location,
        "evidence": f.evidence.to_dict(),
        "sample_rules_context": "log" if done.row_from_log else "transcript",
        "clock_rules_skipped": sorted(done.clock_skipped),
    }


# -- the boolean form (inspect_watch/rules_flag) ----------------------------------------


def lead_finding(findings: Sequence[Finding]) -> Finding | None:
    """The finding a yes/no answer is labelled with: the surest, then the most severe,
    then the earliest (then the rule id, so equal ones pick alike)."""
    if not findings:
        return None
    return min(findings, key=lambda f: (-confidence_rank(f.confidence),
                                        -SEVERITY_RANK.get(f.severity, 0), f.first_seen,
                                        f.rule, f.episode))


def flag_result(transcript: Any, opts: ScanOptions) -> Any:
    """One Scout ``Result`` for the transcript, a boolean: ``value`` ``True`` when the pack
    found something at or above ``opts.min_confidence``, ``label`` the rule id of the
    lead finding (:func:`lead_finding`), ``explanation`` every finding in our words (the
    rule, its confidence and why), ``references`` the events they rest on, ``metadata``
    the lead's fields as :func:`scan_results` gives them plus ``findings`` (each one's)
    and ``rules``. ``False`` (no label) when nothing was found: the transcript was read,
    and a tool counting what its scanners reached counts it."""
    from inspect_scout import Reference, Result

    done = scan_transcript(transcript, opts)
    ruleset = rule_pack(opts).ruleset
    position = {getattr(e, "uuid", None): n for n, e in enumerate(transcript.events or [], 1)}
    position.pop(None, None)
    lead = lead_finding(done.findings)
    if lead is None:
        return Result(value=False, explanation=(
            f"No finding at or above {opts.min_confidence} confidence."),
            metadata={"scanner": FLAG_SCANNER_NAME, "findings": [], "rules": [],
                      "min_confidence": opts.min_confidence,
                      "sample_rules_context": "log" if done.row_from_log else "transcript",
                      "clock_rules_skipped": sorted(done.clock_skipped)})
    ordered = sorted(done.findings, key=lambda f: f is not lead)  # the lead first
    refs: list[Any] = []
    seen: set[str] = set()
    parts: list[str] = []
    findings_meta: list[dict[str, Any]] = []
    for f in ordered:
        cites = []
        for uuid in dict.fromkeys(f.evidence.event_uuids):
            n = position.get(uuid)
            if uuid not in seen:
                seen.add(uuid)
                refs.append(Reference(type="event", id=uuid, cite=f"[E{n}]" if n else None))
            if n:
                cites.append(f"[E{n}]")
        summary = our_summary(f, ruleset)
        parts.append(f"{f.rule}: " + explanation(f, summary, cites).replace("\n\n", " "))
        findings_meta.append(_metadata(f, done, summary))
    head = (f"{len(ordered)} finding{'s' if len(ordered) != 1 else ''} at or above "
            f"{opts.min_confidence} confidence; the first is the label.")
    metadata = {**_metadata(lead, done, findings_meta[0]["summary"]),
                "scanner": FLAG_SCANNER_NAME, "min_confidence": opts.min_confidence,
                "rules": sorted({f.rule for f in ordered}), "findings": findings_meta}
    return Result(value=True, label=lead.rule, explanation="\n\n".join([head, *parts]),
                  references=refs, metadata=metadata)
