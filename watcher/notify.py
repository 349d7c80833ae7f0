"""``--notify URL``: tell a person about a finding on Slack, Teams, Discord, email, ntfy, a
webhook… through Apprise (https://github.com/caronc/apprise), one library for about a
hundred services, each named by a URL (``slack://…``, ``ntfy://…``, ``json://host/path``).

What is sent, and how often:

* findings at or above ``min_confidence`` (``--notify-min-confidence``, default ``high``:
  the level the README says to act on; a notification interrupts a person);
* once per finding episode: an escalation is not sent again, unless it is the snapshot
  that first reaches the minimum (a ``medium`` finding escalated to ``high``);
* at most ``per_minute`` notifications in any 60 seconds (``--notify-rate``, default 5);
  what the limit holds back is sent as one digest (a count and the first few) as soon as
  the minute allows, or when the watch ends;
* never on the watch's thread: sending runs on an :class:`~watcher.alertqueue.AlertWorker`
  (a bounded queue; drops and what was not sent at the end are ``alert_dropped`` notices).

Agent-written text is marked and cut short: at most :data:`EXCERPTS` excerpts of
:data:`EXCERPT_LEN` characters, each as ``agent text (untrusted): «…»``, cleaned of
control and invisible characters, on one line, with ``@``, ``<``, ``>``, Markdown's
punctuation, a scheme's ``://`` and a dot inside a word replaced by look-alikes (so it
cannot mention ``@channel``, format, link or open markup in a chat service that renders
the plain text anyway: Discord, Mattermost, Google Chat, Slack); task and sample names
likewise. The body is sent as plain text and ends by saying which parts the agent wrote.
"""

from __future__ import annotations

import re
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from watcher.alertqueue import NOTIFY_MIN_CONFIDENCE, NOTIFY_PER_MINUTE, QUEUE_SIZE, AlertWorker
from watcher.findings import Finding, Notice, confidence_rank
from watcher.handoff import view_command
from watcher.reporters.formatting import fmt_span
from watcher.sanitize import UNTRUSTED_LABEL, clean_text, quote_agent_text

MIN_CONFIDENCE = NOTIFY_MIN_CONFIDENCE
PER_MINUTE = NOTIFY_PER_MINUTE
EXCERPTS = 2  # agent-text excerpts per notification
EXCERPT_LEN = 120  # characters per excerpt (the engine keeps 160)
BODY_MAX = 1500  # characters per notification body
DIGEST_LISTED = 10  # findings named one by one in a digest
INSTALL_HINT = 'pip install "inspect-watch[notify]"'
FOOTER = (f"Text marked '{UNTRUSTED_LABEL}' was written by the evaluated agent; task and "
          "sample names come from the eval's dataset. Neither is the watcher's assessment. "
          "inspect-watch only observes: it has not changed anything.")
# the footer under `watch --act`: the watcher may act, and says so in its records
FOOTER_ACTING = (f"Text marked '{UNTRUSTED_LABEL}' was written by the evaluated agent; task "
                 "and sample names come from the eval's dataset. Neither is the watcher's "
                 "assessment. inspect-watch --act acts on findings as its policy says; what it "
                 "did is in its action records, not in this message.")


class NotifyError(Exception):
    """``--notify`` cannot work: Apprise is missing, or a URL is not one it knows."""


def load_apprise(urls: Sequence[str]) -> Any:
    """An ``apprise.Apprise`` holding ``urls``, or :class:`NotifyError` saying what to do."""
    try:
        import apprise
    except ImportError as e:
        raise NotifyError(f"--notify needs the Apprise library, which is not installed: "
                          f"{INSTALL_HINT}") from e
    ap = apprise.Apprise()
    for url in urls:
        if not ap.add(url):
            scheme = url.split("://", 1)[0] if "://" in url else url[:20]
            # the rest of the URL may hold a token: never echo it
            raise NotifyError(f"--notify: Apprise does not understand the URL "
                              f"{clean_text(scheme, 40, one_line=True)}://… (see "
                              "https://github.com/caronc/apprise/wiki for the URL of each "
                              "service)")
    return ap


# Markdown (and Slack mrkdwn) punctuation, as look-alikes that no service renders: the
# body goes as plain text, but Discord, Mattermost, Google Chat and Slack render it anyway
_MARKUP = str.maketrans({
    "@": "\uff20", "<": "\u2039", ">": "\u203a",  # mentions, HTML, quotes, <url|text>
    "*": "\u2217", "_": "\uff3f", "~": "\uff5e", "`": "\u02cb",  # emphasis, code
    "[": "\uff3b", "]": "\uff3d", "|": "\u2502", "#": "\uff03", "\\": "\u2216",  # links, headings
})
_PATH = str.maketrans({c: _MARKUP[ord(c)] for c in "@<>[]`|"})
# what a chat service turns into a link without markup: a scheme, a www. or a domain
_SCHEME = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*):(//)?")
_DOT = re.compile(r"(?<=\w)\.(?=\w)")


def _inert(text: str, links: bool = True) -> str:
    """Agent- or dataset-derived text that cannot mention people, format, link or open
    markup in a chat service: its markup characters become look-alikes
    (``[x](http://y)`` reads ``［x］(http:∕∕y)``), a scheme's ``://`` and a dot inside a
    word (``evil.example``) too, so no service makes a link of it. ``links=False``
    keeps the dots (a log path named in full)."""
    if not links:  # the user's log path, to copy: no mention, tag, link text or code
        return text.translate(_PATH)
    text = _SCHEME.sub(lambda m: m.group(1) + ("\u2236\u2215\u2215" if m.group(2) else ":"),
                       text.translate(_MARKUP))
    return _DOT.sub("\u2024", text)


def _one(value: object, limit: int, links: bool = True) -> str:
    return _inert(clean_text(value, limit, one_line=True), links)


def _limit(text: str, limit: int = BODY_MAX) -> str:
    return text if len(text) <= limit else text[: limit - 12] + "… [cut]"


def finding_title(f: Finding) -> str:
    """The watcher's words, the rule's title and the eval's names (cleaned); no agent text."""
    s = f.sample
    return _limit(f"inspect-watch {f.confidence.upper()}: {_one(f.title, 100)} · task "
                  f"{_one(s.task, 60)} · sample {_one(s.sample_id, 60)}", 250)


def finding_body(f: Finding, footer: str = FOOTER) -> str:
    """A short plain-text account of one finding, agent text marked and bounded."""
    s = f.sample
    lines = [
        # the rule's words and the eval's model are the user's own: only tags and code
        # spans neutralised (their _ kept); the dataset's names and agent text all of it
        f"{f.confidence.upper()} confidence, {_one(f.severity, 20, False)}: rule "
        f"{_one(f.rule, 80, False)} ({_one(f.category, 40, False)}), finding id "
        f"{_one(f.id, 20, False)}",
        f"task {_one(s.task, 100)} · model {_one(s.model, 100, False)} · sample "
        f"{_one(s.sample_id, 100)}"
        f" · epoch {s.epoch} · attempt {s.attempt}",
        f"seen {fmt_span(f)}",
        f"why {f.confidence}: {_one(f.confidence_reason, 300)}",
        f"summary (the rule's words; it may quote the agent): {_one(f.summary, 240)}",
    ]
    for text in f.evidence.excerpts[:EXCERPTS]:
        lines.append(_inert(quote_agent_text(text, EXCERPT_LEN, one_line=True)))
    if len(f.evidence.excerpts) > EXCERPTS:
        lines.append(f"(+{len(f.evidence.excerpts) - EXCERPTS} more excerpts in the findings "
                     "output)")
    if s.log_location:
        lines.append(f"log: {_one(s.log_location, 300, links=False)} (open with: "
                     f"{_one(view_command(s.log_location), 320, links=False)})")
    if s.pid is not None:
        lines.append(f"eval process: pid {int(s.pid)}")
    body = _limit("\n".join(lines), BODY_MAX - len(footer) - 2)
    return f"{body}\n\n{footer}"


def digest_title(count: int) -> str:
    return f"inspect-watch: {count} more finding(s) held back by the rate limit"


def digest_body(held: Sequence[Finding], per_minute: int, total: int | None = None,
                footer: str = FOOTER) -> str:
    """The held-back findings: the first :data:`DIGEST_LISTED` named, the rest counted."""
    total = len(held) if total is None else total
    lines = [f"At most {per_minute} notification(s) a minute (--notify-rate): these "
             f"{total} finding(s) were not sent one by one."]
    for f in held[:DIGEST_LISTED]:
        s = f.sample
        lines.append(f"- {f.confidence.upper()} {_one(f.rule, 80, False)} · task "
                     f"{_one(s.task, 60)} · "
                     f"sample {_one(s.sample_id, 60)} · epoch {s.epoch} · id {_one(f.id, 20)}")
    if total > DIGEST_LISTED:
        lines.append(f"- and {total - DIGEST_LISTED} more (see the findings output)")
    body = _limit("\n".join(lines), BODY_MAX - len(footer) - 2)
    return f"{body}\n\n{footer}"


_SEVERITY_TYPE = {"critical": "failure", "warning": "warning", "info": "info"}


class Notifier:
    """A sink that sends findings through Apprise, off the watch's thread.

    ``send(title, body, notify_type) -> bool`` may replace Apprise (for other transports);
    ``clock`` (monotonic seconds) drives the rate limit.
    """

    def __init__(self, urls: Sequence[str], *, min_confidence: str = MIN_CONFIDENCE,
                 per_minute: int = PER_MINUTE, queue_size: int = QUEUE_SIZE,
                 send: Callable[[str, str, str], bool] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if per_minute < 1:
            raise ValueError("per_minute must be at least 1")
        self.min_rank = confidence_rank(min_confidence)
        self.per_minute = per_minute
        self._send = send if send is not None else _apprise_sender(load_apprise(urls))
        self._clock = clock
        self.footer = FOOTER
        self._episodes: set[str] = set()  # finding ids sent (or queued to be sent)
        self._recent: deque[float] = deque()  # when the last notifications went out
        self._held: list[Finding] = []  # the first DIGEST_LISTED held back ...
        self._held_total = 0  # ... and how many in all (a long run must not keep them all)
        self._lock = threading.Lock()
        self.sent = 0
        self.digests = 0
        self.failures = 0
        self.worker: AlertWorker[Finding] = AlertWorker(
            "--notify", self._deliver, maxsize=queue_size, idle=self._flush_held,
            held=self._held_count)

    # -- the watch's side ------------------------------------------------------

    def start(self, context: Any) -> None:
        # a watch that may act must not say it only observes
        if getattr(context, "acting", ""):
            self.footer = FOOTER_ACTING

    def finding(self, f: Finding) -> None:
        if f.status == "ended" or confidence_rank(f.confidence) < self.min_rank:
            return
        if f.id in self._episodes:
            return  # once per episode: an escalation above the minimum is not news here
        self._episodes.add(f.id)
        self.worker.submit(f)

    def notice(self, n: Notice) -> None:
        return None

    takes_status = False  # (the watch builds no snapshot for it)

    def status(self, snapshot: Any) -> None:
        return None

    def pop_notices(self) -> list[Notice]:
        return self.worker.pop_notices()

    def drain(self, timeout: float) -> None:
        """The watch is ending: send what is queued (and the digest) within ``timeout``."""
        self.worker.close(timeout)

    def stop(self, summary: Any = None) -> None:
        self.worker.close(0.0)

    # -- the worker's side -------------------------------------------------------

    def _held_count(self) -> int:
        with self._lock:
            return self._held_total

    def _room(self) -> bool:
        now = self._clock()
        while self._recent and now - self._recent[0] >= 60.0:
            self._recent.popleft()
        return len(self._recent) < self.per_minute

    def _deliver(self, f: Finding) -> None:
        with self._lock:
            if self._held_total or not self._room():
                self._held_total += 1  # behind the held ones: they all go out as a digest
                if len(self._held) < DIGEST_LISTED:
                    self._held.append(f)
                return
            self._recent.append(self._clock())
        ok = self._send(finding_title(f), finding_body(f, self.footer),
                        _SEVERITY_TYPE.get(f.severity, "warning"))
        self._count(ok)

    def _flush_held(self, final: bool) -> None:
        """Send what the limit held back as one digest when the minute allows (or at the
        end of the watch, whatever the limit)."""
        with self._lock:
            if not self._held_total or not (final or self._room()):
                return
            held, total, self._held, self._held_total = self._held, self._held_total, [], 0
            self._recent.append(self._clock())
        ok = self._send(digest_title(total), digest_body(held, self.per_minute, total,
                                                           self.footer),
                        "warning")
        self.digests += 1
        self._count(ok)

    def _count(self, ok: bool) -> None:
        if ok:
            self.sent += 1
            return
        self.failures += 1
        self.worker.count_failure()
        print("inspect-watch: --notify could not deliver a notification (Apprise logs why); "
              "the watch goes on", file=sys.stderr)


def _apprise_sender(ap: Any) -> Callable[[str, str, str], bool]:
    import apprise

    types = {"info": apprise.NotifyType.INFO, "warning": apprise.NotifyType.WARNING,
             "failure": apprise.NotifyType.FAILURE}

    def send(title: str, body: str, notify_type: str) -> bool:
        return bool(ap.notify(title=title, body=body, notify_type=types[notify_type],
                              body_format=apprise.NotifyFormat.TEXT))

    return send
