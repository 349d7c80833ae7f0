"""What ``x`` in ``inspect-watch top`` does: cancel the selected finding's sample through
its eval's control channel, after the person confirmed the target the screen named.

A person acting, not the watchdog: no policy, no grace. The steps are the watchdog's
own safety steps (docs/watchdog.md) that a person's action needs too: the eval's
control server is found by its pid (never a finished run read from logs), the server's
own dry run answers first (a stock 404 means its Inspect predates the route: nothing
is done), and the words say only what the server answered ("requested", never "the
sample was cancelled": the listing shows that later). The server's words are untrusted
and are cleaned before they reach the screen.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from watcher.act.control import ControlClient
from watcher.act.verbs import CANCEL_SAMPLE, SAMPLE_ACTIONS
from watcher.discovery import ControlServer, list_servers
from watcher.findings import Finding
from watcher.sanitize import clean_text, exact_text, visible_text
from watcher.sources.base import SourceError
from watcher.sources.http import ControlAnswer, HttpSource

# the cancel actions the control channel offers (its sample-cancel verb's)
ACTIONS = SAMPLE_ACTIONS
WORDS = {"score": "cancel it and score what it did", "cancel": "cancel it without scoring"}


class ControlActions:
    """:class:`watcher.top.app.Actions` over the control channels of running evals."""

    def __init__(self, servers: Callable[[], list[ControlServer]] = list_servers) -> None:
        self._servers = servers

    def _client(self, f: Finding) -> HttpSource | None:
        pid = f.sample.pid
        if pid is None:
            return None
        for server in self._servers():
            if server.pid == pid:
                return HttpSource(server, retries=0)
        return None

    def available(self, finding: Finding) -> Sequence[str]:
        """Both cancels, while the sample's eval process serves a control channel."""
        client = self._client(finding)
        if client is None:
            return ()
        client.close()
        return ACTIONS

    def _ask(self, f: Finding, action: str, *, dry_run: bool) -> ControlAnswer | str:
        client = self._client(f)
        if client is None:
            return "its eval process no longer serves a control channel"
        try:
            return ControlClient(client).send(CANCEL_SAMPLE, f.sample, {"action": action},
                                              dry_run=dry_run)
        except SourceError as e:
            return str(e)
        finally:
            client.close()

    def target(self, finding: Finding, action: str) -> str:
        """The target named in full, and what the server's dry run answered."""
        return target_words(finding, action,
                            _words(self._ask(finding, action, dry_run=True)))

    def run(self, finding: Finding, action: str) -> str:
        """The real request; the server's answer in words that claim no more than it."""
        answer = self._ask(finding, action, dry_run=False)
        if isinstance(answer, ControlAnswer) and answer.ok:
            return clean_text(f"cancel ({action}) requested; the server accepted it. The "
                              "samples listing will show when the sample has ended.", 600)
        return clean_text(f"nothing done: {_words(answer)}", 600)


def target_words(finding: Finding, action: str, dry_run: str) -> str:
    """What a confirmation names: the ids exactly, every character visible (two ids that
    only look alike, an invisible character or a Cyrillic letter apart, read apart),
    then the server's dry run (its words cleaned)."""
    s = finding.sample
    lines = [f"{WORDS.get(action, action)}: sample {visible_text(s.sample_id)} epoch "
             f"{s.epoch} (attempt {s.attempt}) of task {visible_text(s.task)}, eval "
             f"{visible_text(s.eval_id)}, pid {s.pid}."]
    odd = [(name, v) for name, v in (("sample", s.sample_id), ("task", s.task))
           if not (v.isascii() and v.isprintable())]
    for name, value in odd:
        lines.append(f"exact {name} id: {exact_text(value)}")
    lines.append(f"The server's dry run: {clean_text(dry_run, 1500, one_line=True)}")
    return "\n".join(lines)


def _words(answer: ControlAnswer | str) -> str:
    if isinstance(answer, str):
        return f"no answer ({answer})"
    if answer.route_missing:
        return "this eval's Inspect has no sample-cancel route (an older version)"
    if answer.ok:
        body = answer.body if isinstance(answer.body, dict) else {}
        detail = ", ".join(f"{k}={v}" for k, v in body.items() if k != "ok")[:300]
        return f"it would be accepted ({detail})" if detail else "it would be accepted"
    return f"refused (HTTP {answer.status}: {answer.error or answer.body})"
