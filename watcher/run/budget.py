"""What a run spent, task by task and for the whole watch, and a token budget per task.

Inspect budgets one sample (``--token-limit``); users ask for a budget above that: the
tokens of a whole task. The view here adds up what each sample of each watched task
spent, as Inspect counts it (the samples listing's or the log's ``total_tokens``: a
running sample's usage so far, a finished one's total), and says how much of it went
to samples caught in a loop (from a loop finding's first evidence on, its
``tokens_since_first_seen``; those still open apart).

With ``--task-budget TOKENS`` a task whose samples' tokens pass the budget raises a
finding (rule ``task-budget``, category ``budget``, one episode per task): the watchdog
(``--act``) may act on it as its policy says (its built-in policy drains the task: no
new samples start, running ones finish), and without ``--act`` its hand-off offers
``inspect ctl task drain`` with its dry run. It is written when the task passes the
budget, and again when the task ends, with the final figures.

Every figure says what was counted and what was not: samples whose row has no token
figure (a source without one, a sample not started), model calls still in flight (their
usage is added when they complete), earlier attempts Inspect no longer counts in a
retried sample's row, and samples this watch does not read (outside ``TASK
SAMPLE_ID``, another shard).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from watcher.findings import (
    LOOP_CATEGORIES,
    SPEND_FACTS,
    Evidence,
    Finding,
    Notice,
    SampleRef,
    confidence_rank,
    finding_id,
)

RULE = "task-budget"
CATEGORY = "budget"
# the facts of its finding (what an action policy's conditions may name)
BUDGET_FACTS = ("task_tokens", "budget", "over_by", "samples_counted", "samples_not_counted",
                "in_loops", "in_loops_share", "in_open_loops", "in_open_loops_share",
                "counted", "not_counted", "top_sample_tokens")
COUNTED = ("Inspect's own token count of each sample the watch read (its row's "
           "total_tokens: a running sample's usage so far, a finished one's total)")
NOT_COUNTED = ("samples whose row has no token figure, model calls still in flight (added "
               "when they complete), earlier attempts of retried samples, and samples this "
               "watch does not read")


@dataclass(frozen=True)
class SampleSpend:
    """One sample (epoch) as the view counts it."""

    sample_id: str
    epoch: int
    attempt: int
    tokens: int | None  # None: its row has no figure
    running: bool
    ended_at: float | None = None  # when a finished one ended, if its row says


@dataclass(frozen=True)
class TaskSpend:
    """What one task's samples spent, as far as the watch can tell."""

    task: str
    task_id: str
    eval_id: str
    model: str
    tokens: int
    samples_counted: int
    samples_not_counted: int
    in_loops: int  # tokens after a loop finding's first evidence (open or ended)
    in_open_loops: int  # the same, of loop findings still open
    finished: bool = False
    pid: int | None = None
    log_location: str | None = None

    def share(self, part: int) -> float | None:
        return round(part / self.tokens, 4) if self.tokens else None

    def as_dict(self) -> dict[str, Any]:
        return {"task": self.task, "task_id": self.task_id, "eval_id": self.eval_id,
                "model": self.model, "tokens": self.tokens,
                "samples_counted": self.samples_counted,
                "samples_not_counted": self.samples_not_counted,
                "in_loops": self.in_loops, "in_loops_share": self.share(self.in_loops),
                "in_open_loops": self.in_open_loops,
                "in_open_loops_share": self.share(self.in_open_loops),
                "finished": self.finished}


# loop findings that count: a strong pattern or more (a low one is a weak inference)
LOOP_FLOOR = "medium"


def loop_tokens(findings: Iterable[Finding]) -> dict[str, tuple[int, int]]:
    """Per eval id, the tokens its samples spent after their loop findings' first
    evidence (medium or high ones): (all of them, those still open). A sample counts
    once, from its earliest loop finding (the one that spent the most after it)."""
    since = SPEND_FACTS[0]
    floor = confidence_rank(LOOP_FLOOR)
    per_sample: dict[tuple[str, str, int, int], tuple[int, bool]] = {}
    for f in findings:
        tokens = f.evidence.facts.get(since)
        if (f.category not in LOOP_CATEGORIES or type(tokens) is not int
                or confidence_rank(f.confidence) < floor):
            continue
        s = f.sample
        key = (s.eval_id, s.sample_id, s.epoch, s.attempt)
        was = per_sample.get(key)
        is_open = f.status != "ended"
        if was is None or tokens > was[0]:
            per_sample[key] = (tokens, is_open or (was is not None and was[1]))
        elif is_open:
            per_sample[key] = (was[0], True)
    out: dict[str, tuple[int, int]] = {}
    for (eval_id, *_), (tokens, is_open) in per_sample.items():
        total, still = out.get(eval_id, (0, 0))
        out[eval_id] = (total + tokens, still + (tokens if is_open else 0))
    return out


def task_spend(task: Any, samples: Iterable[SampleSpend], loops: tuple[int, int],
               finished: bool = False) -> TaskSpend:
    """A task's view from its samples (``task``: its ``TaskInfo``, or a ``TaskSummary``)."""
    rows = list(samples)
    counted = [r.tokens for r in rows if r.tokens is not None]
    return TaskSpend(task=task.task, task_id=task.task_id, eval_id=task.eval_id,
                     model=task.model, tokens=sum(counted), samples_counted=len(counted),
                     samples_not_counted=len(rows) - len(counted), in_loops=loops[0],
                     in_open_loops=loops[1], finished=finished,
                     pid=getattr(task, "pid", None), log_location=task.log_location)


def sample_spend(sample_id: str, epoch: int, raw: dict[str, Any], attempt: int,
                 running: bool, ended_at: float | None = None) -> SampleSpend:
    tokens = raw.get("total_tokens")
    return SampleSpend(sample_id, epoch, attempt, tokens if type(tokens) is int else None,
                       running, ended_at)


def crossing(samples: list[SampleSpend], budget: int) -> SampleSpend | None:
    """For a task whose samples have all ended and say when: the sample whose end took
    the task past ``budget`` (so a finding read from logs is dated then, not at the
    scan); ``None`` otherwise."""
    counted = [s for s in samples if s.tokens is not None]
    if any(s.running for s in samples) or any(s.ended_at is None for s in counted):
        return None
    total = 0
    for s in sorted(counted, key=lambda s: (s.ended_at or 0.0, s.sample_id, s.epoch)):
        total += s.tokens or 0
        if total > budget:
            return s
    return None


def watch_totals(tasks: list[TaskSpend]) -> dict[str, Any]:
    """The whole watch: every task's figures added up."""
    tokens = sum(t.tokens for t in tasks)
    in_loops = sum(t.in_loops for t in tasks)
    in_open = sum(t.in_open_loops for t in tasks)
    return {"tokens": tokens, "tasks": len(tasks),
            "samples_counted": sum(t.samples_counted for t in tasks),
            "samples_not_counted": sum(t.samples_not_counted for t in tasks),
            "in_loops": in_loops,
            "in_loops_share": round(in_loops / tokens, 4) if tokens else None,
            "in_open_loops": in_open,
            "in_open_loops_share": round(in_open / tokens, 4) if tokens else None}


def spend_notice(tasks: list[TaskSpend], at: float, budget: int | None = None) -> Notice:
    """The run-level view as one notice (kind ``spend``): per task and for the watch,
    with what was counted and what was not."""
    total = watch_totals(tasks)
    share = total["in_loops_share"]
    loops = (f"; {total['in_loops']:,} ({share:.0%}) after a loop finding's first evidence"
             if share else "")
    missing = (f"; {total['samples_not_counted']} sample(s) without a token figure"
               if total["samples_not_counted"] else "")
    message = (f"spend: {total['tokens']:,} tokens in {len(tasks)} task(s), "
               f"{total['samples_counted']} sample(s) counted{loops}{missing}")
    return Notice(kind="spend", message=message, at=at, details={
        "watch": total, "tasks": [t.as_dict() for t in tasks], "task_budget": budget,
        "counted": COUNTED, "not_counted": NOT_COUNTED})


def merged_spend(notices: list[Notice]) -> list[Notice]:
    """``notices`` with their ``spend`` notices (from several findings files: shards of one
    scan, watchers of one run) made one: each task counted once (its latest view), the
    totals added up again. Notices whose details cannot be read are kept as they are."""
    spends = [n for n in notices if n.kind == "spend"]
    if len(spends) < 2:
        return notices
    tasks: dict[str, TaskSpend] = {}
    budget: int | None = None
    try:
        for n in sorted(spends, key=lambda n: n.at):
            details = n.details or {}
            budget = details.get("task_budget", budget)
            for t in details["tasks"]:
                tasks[t["eval_id"]] = TaskSpend(
                    t["task"], t["task_id"], t["eval_id"], t["model"], int(t["tokens"]),
                    int(t["samples_counted"]), int(t["samples_not_counted"]),
                    int(t["in_loops"]), int(t["in_open_loops"]), bool(t["finished"]))
    except (KeyError, TypeError, ValueError):
        return notices
    merged = spend_notice(list(tasks.values()), max(n.at for n in spends),
                          budget if type(budget) is int else None)
    first = notices.index(spends[0])
    rest = [n for n in notices if n.kind != "spend"]
    return rest[:first] + [merged] + rest[first:]


class TaskBudget:
    """Raises one ``task-budget`` finding per task whose tokens pass ``tokens``."""

    def __init__(self, tokens: int) -> None:
        self.tokens = tokens
        self.raised: dict[str, Finding] = {}  # eval id -> its finding's last snapshot
        self.ended: set[str] = set()

    def check(self, spend: TaskSpend, samples: list[SampleSpend], now: float
              ) -> Finding | None:
        """The task's finding if this view is news: it passed the budget now, or (after
        it did) the task has finished (the final figures, status ``ended``)."""
        f = self.raised.get(spend.eval_id)
        if f is None:
            if spend.tokens <= self.tokens:
                return None
            f = self._open(spend, samples, now)
            self.raised[spend.eval_id] = f
            return f
        if spend.finished and spend.eval_id not in self.ended:
            self.ended.add(spend.eval_id)
            ends = [s.ended_at for s in samples if s.ended_at is not None]
            if ends and len(ends) == len(samples):
                now = max(max(ends), f.first_seen)  # the task's end (read from a log)
            f = replace(f, status="ended", last_seen=now, evidence=replace(
                f.evidence, facts=self._facts(spend)), summary=self._summary(spend))
            self.raised[spend.eval_id] = f
            return f
        return None

    def _facts(self, spend: TaskSpend) -> dict[str, Any]:
        return {"task_tokens": spend.tokens, "budget": self.tokens,
                "over_by": spend.tokens - self.tokens,
                "samples_counted": spend.samples_counted,
                "samples_not_counted": spend.samples_not_counted,
                "in_loops": spend.in_loops, "in_loops_share": spend.share(spend.in_loops),
                "in_open_loops": spend.in_open_loops,
                "in_open_loops_share": spend.share(spend.in_open_loops),
                "counted": COUNTED, "not_counted": NOT_COUNTED}

    def _summary(self, spend: TaskSpend) -> str:
        return (f"the task's samples spent {spend.tokens:,} tokens, past its budget of "
                f"{self.tokens:,} ({spend.samples_counted} sample(s) counted"
                + (f", {spend.samples_not_counted} without a token figure"
                   if spend.samples_not_counted else "") + ")")

    def _open(self, spend: TaskSpend, samples: list[SampleSpend], now: float) -> Finding:
        # the finding is the task's; it names the sample whose end took the task past
        # the budget (dated then), or, while samples run, the one still running that has
        # spent the most (else of all), where the task's budget went
        crossed = crossing(samples, self.tokens)
        pick = crossed or max(samples, key=lambda s: (s.running, s.tokens or 0, s.sample_id))
        if crossed is not None and crossed.ended_at is not None:
            now = crossed.ended_at
        ref = SampleRef(task=spend.task, task_id=spend.task_id, eval_id=spend.eval_id,
                        model=spend.model, sample_id=pick.sample_id, epoch=pick.epoch,
                        attempt=pick.attempt, log_location=spend.log_location,
                        pid=spend.pid)
        facts = self._facts(spend)
        facts["top_sample_tokens"] = pick.tokens
        return Finding(
            id=finding_id(RULE, SampleRef(spend.task, spend.task_id, spend.eval_id,
                                          spend.model, "", 0), 1),
            rule=RULE, title="Task passed its token budget", category=CATEGORY,
            severity="warning", confidence="high", score=1.0,
            confidence_reason="Inspect's own token counts of the task's samples add up past "
                              "the budget set with --task-budget.",
            sample=ref, summary=self._summary(spend),
            evidence=Evidence(timestamps=(now,), facts=facts), first_seen=now,
            last_seen=now, count=1, status="open",
            handoff="The task has spent more tokens than its budget. Drain it (no new "
                    "samples start; running ones finish) or cancel what is looping; "
                    "raise --task-budget if the budget was too low.")
