"""The control channel's mutations, declared: one :class:`Verb` per thing the watchdog
(and a person in ``top``) can ask an eval to do.

As a detector kind is declared once in the engine (its parameters, its words) and
read everywhere else, a verb is declared here once: its route, what it acts on, what
it is asked with, what it does in words and what confirms it. The policy parser, the
watchdog's steps, its records and the hand-off read these declarations; none of them
spells a verb's name or route (the routes are Inspect's,
``inspect_ai/_control/server.py``; every one takes ``dry_run``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from watcher.act import routes
from watcher.findings import SampleRef
from watcher.sanitize import clean_text, neutralise_quotes

Args = Mapping[str, Any]

# how cancel_sample may end a sample: scored, or recorded cancelled (never "error")
SAMPLE_ACTIONS = ("score", "cancel")
# a whole run's graceful shutdown (kill -INT): a signal, not a control-channel route
INTERRUPT_RUN = "interrupt_run"


def said(text: str) -> str:
    """The server's (or the eval's) words, quoted and cleaned: never our own words."""
    return f"«{neutralise_quotes(clean_text(text, 300, one_line=True))}»"


@dataclass(frozen=True)
class Verb:
    """One mutation of the control channel.

    ``route`` is its ``POST`` path (``{eval_id}``, ``{task_id}`` from the finding's
    sample); ``scope`` what it acts on (``sample``, ``tool_call`` or ``task``);
    ``arguments`` the ``act:`` keys it takes besides ``verb``; ``body`` its request
    parameters; ``plan`` what it will do, in a hand-off's words, and ``doing`` what was
    asked, in an action record's; ``after`` what follows an accepted request; and
    ``confirmed_by_row``: a request is only "requested" until the sample's row shows
    the sample ended by it.
    """

    name: str
    route: str
    scope: str
    arguments: tuple[str, ...]
    body: Callable[[SampleRef, Args], dict[str, Any]]
    plan: Callable[[Args], str]
    doing: Callable[[Args], str]
    after: str = ""
    confirmed_by_row: bool = False

    @property
    def about_task(self) -> bool:
        """It acts on the task: whichever of its samples a finding names need not run."""
        return self.scope == "task"

    @property
    def shown_route(self) -> str:
        """The route as messages name it (``/sample/cancel``, ``/tasks/{id}/drain``)."""
        return self.route.removeprefix(routes.EVAL).replace("{task_id}", "{id}")

    def path(self, s: SampleRef) -> str:
        return self.route.format(eval_id=s.eval_id, task_id=s.task_id)

    def params(self, s: SampleRef, args: Args, *, dry_run: bool) -> dict[str, Any]:
        return {**self.body(s, args), "dry_run": dry_run}


def _sample(s: SampleRef) -> dict[str, Any]:
    return {"sample_id": s.sample_id, "epoch": s.epoch}


def _tool_call_doing(args: Args) -> str:
    call = args.get("tool_call_id")
    return "cancel the pending tool call" + (f" {said(str(call))}" if call else "")


CANCEL_SAMPLE = Verb(
    name="cancel_sample", route=routes.SAMPLE_CANCEL, scope="sample",
    arguments=("action",),
    body=lambda s, a: {**_sample(s), "action": a["action"]},
    plan=lambda a: f"cancel the sample (action {a.get('action') or 'score'})",
    doing=lambda a: f"cancel the sample (action {a.get('action', 'score')})",
    confirmed_by_row=True)
CANCEL_TOOL_CALL = Verb(
    name="cancel_tool_call", route=routes.SAMPLE_CANCEL_TOOL_CALL,
    scope="tool_call", arguments=(),
    body=lambda s, a: {**_sample(s), "tool_call_id": a.get("tool_call_id")},
    plan=lambda a: "cancel its pending tool call (the sample continues)",
    doing=_tool_call_doing,
    after="; the sample continues (the model sees a tool timeout)")
DRAIN_TASK = Verb(
    name="drain_task", route=routes.TASK_DRAIN, scope="task", arguments=(),
    body=lambda s, a: {},
    plan=lambda a: "drain the task (no new samples; running ones finish)",
    doing=lambda a: "drain the task",
    after="; running samples finish on their own")
PAUSE_TASK = Verb(
    name="pause_task", route=routes.TASK_PAUSE, scope="task", arguments=("now",),
    body=lambda s, a: {"now": bool(a.get("now"))},
    plan=lambda a: "pause the task" + (" now (in-flight samples held)" if a.get("now")
                                       else " (no new samples start)"),
    doing=lambda a: "pause the task" + (" now" if a.get("now") else ""))

VERBS: dict[str, Verb] = {v.name: v for v in (CANCEL_SAMPLE, CANCEL_TOOL_CALL, DRAIN_TASK,
                                              PAUSE_TASK)}


def scope_of(verb: str) -> str:
    """What an action of ``verb`` acts on (a run's interrupt: ``run``; else ``sample``)."""
    if verb == INTERRUPT_RUN:
        return "run"
    declared = VERBS.get(verb)
    return declared.scope if declared is not None else "sample"
