"""Alerts beside the watch: ``--on-finding`` commands and ``--notify`` (Apprise) never hold up
the other outputs, send once per episode, rate-limited, and mark agent text."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests.evalproc import alive, default_sigint
from tests.jsonlines import complete_records
from watcher.findings import Finding
from watcher.hooks import CommandHook
from watcher.notify import EXCERPT_LEN, FOOTER, Notifier, finding_body, finding_title
from watcher.reporters.examples import HOSTILE, example_snapshots
from watcher.sanitize import UNTRUSTED_LABEL

# runs until the test releases it (10 min at most); says when it started (with its pid)
# and ended
HOOK = """
import os, pathlib, sys, time
d = pathlib.Path(sys.argv[1])
data = sys.stdin.read()
n = len(list(d.glob("started.*"))) + 1
(d / f"started.{n}").write_text(f"{os.getpid()}\\n{data}")
for _ in range(6000):
    if (d / "release").exists():
        break
    time.sleep(0.1)
(d / f"finished.{n}").write_text(data)
"""


def _records(path: Path) -> list[dict[str, Any]]:
    return complete_records(path)




@pytest.mark.e2e
def test_a_slow_hook_does_not_hold_up_the_jsonl_of_a_real_watch(eval_runner: Any,
                                                                tmp_path: Path) -> None:
    """Before, the watch ran each command on its routing thread: the JSONL line of the next
    finding waited for the hook (killed after 10 s). Now every line, up to the eval's exit,
    is written while the hook's first run is still going; the rest run after it, at the
    end, and none is lost."""
    # kept inspectable until the watch has read it (a busy machine may start the watch
    # after the eval ended), then released by the watch
    proc = eval_runner("loops", "--ctl-server", "keep", tool_delay=0.1)
    proc.discovery()
    hook_dir = tmp_path / "hook"
    hook_dir.mkdir()
    script = tmp_path / "hook.py"
    script.write_text(HOOK)
    out = tmp_path / "findings.jsonl"
    watcher = subprocess.Popen(
        [sys.executable, "-m", "watcher", "watch", "--poll", "0.3", "--format", "jsonl",
         "-o", str(out), "--on-finding", f"{sys.executable} {script} {hook_dir}",
         "--on-finding-timeout", "900", "--alert-drain", "900", "--release-when-done"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    try:
        guard = time.monotonic() + 900  # bounds a hung watch only: the exit is awaited
        while watcher.poll() is None:
            if any(r.get("notice") == "process_exited" for r in _records(out)):
                break
            assert time.monotonic() < guard, "the watch never saw the eval exit"
            time.sleep(0.2)
        records = _records(out)
        # the whole watch is on file: both loops, to the eval's exit ...
        assert {"repeated-tool-call", "submit-loop"} <= {r.get("rule") for r in records}
        assert any(r.get("notice") == "process_exited" for r in records)
        # ... while the hook's first run has not finished (and the second has not started)
        pid = int((hook_dir / "started.1").read_text().split("\n", 1)[0])
        assert alive(pid) and not (hook_dir / "finished.1").exists()
        assert not (hook_dir / "started.2").exists()
        (hook_dir / "release").touch()
        stdout, stderr = watcher.communicate(timeout=900)
    finally:
        if watcher.poll() is None:
            watcher.kill()
            watcher.wait()
    assert watcher.returncode == 0, stderr
    # the end of the watch waited for what was queued: every new or escalated snapshot
    # reached the command, in order, and nothing was reported dropped
    records = _records(out)
    # the news (a later line of an open finding, as it grew, is not news: no hook run)
    sent = list(dict.fromkeys(r["id"] + r["status"] + r["confidence"] for r in records
                              if r["kind"] == "finding" and r["status"] != "ended"))
    runs = sorted(hook_dir.glob("finished.*"), key=lambda p: int(p.suffix[1:]))
    got = [json.loads(p.read_text()) for p in runs]
    assert [d["id"] + d["status"] + d["confidence"] for d in got] == sent
    assert not [r for r in records if r.get("notice", "").startswith("alert_")]


def _hook_for(tmp_path: Path) -> tuple[CommandHook, Path]:
    script = tmp_path / "hook.py"
    script.write_text(HOOK)
    hook_dir = tmp_path / "hook"
    hook_dir.mkdir()
    return CommandHook(f"{sys.executable} {script} {hook_dir}", timeout=120,
                       queue_size=1), hook_dir


def test_a_full_queue_drops_counts_and_says_so(tmp_path: Path) -> None:
    """A command slower than findings arrive: the queue holds one, the rest are dropped
    (submit never blocks), a notice says so during the watch, and the end says what was
    dropped, left queued and cut short: together, every finding not handled."""
    hook, hook_dir = _hook_for(tmp_path)
    snaps = [s for s in example_snapshots() if s.status != "ended"]
    assert hook.worker.submit("{}\n")  # the first is taken by the worker at once
    while not (hook_dir / "started.1").exists():
        time.sleep(0.05)
    for f in snaps:
        hook.finding(f)
    during = hook.pop_notices()
    assert [n.kind for n in during] == ["alert_dropped"]
    assert "--on-finding: its queue of 1 is full" in during[0].message
    assert during[0].details["dropped"] == len(snaps) - 1
    assert hook.pop_notices() == []  # said once, not for every drop
    hook.drain(0.5)  # the command is still waiting: it is cut short, the queued one unsent
    [end] = hook.pop_notices()
    assert end.kind == "alert_dropped"
    assert end.details == {"alert": "--on-finding", "submitted": len(snaps) + 1,
                           "dropped": len(snaps) - 1, "unsent": 1, "cut_short": 1}
    assert (f"{len(snaps) + 1} of {len(snaps) + 1} finding(s) not handled: "
            f"{len(snaps) - 1} dropped while its queue of 1 was full, 1 still queued when the "
            "watch ended, 1 cut short") in end.message
    pid = int((hook_dir / "started.1").read_text().split("\n", 1)[0])
    deadline = time.time() + 10
    while alive(pid) and time.time() < deadline:
        time.sleep(0.05)
    assert not alive(pid)  # the end of the watch leaves no command behind
    assert not (hook_dir / "finished.1").exists()


# --- notifications ---------------------------------------------------------------------


class Receiver:
    """A real HTTP server on 127.0.0.1 that records every JSON body posted to it."""

    def __init__(self) -> None:
        self.posts: list[dict[str, Any]] = []
        posts = self.posts

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                length = int(self.headers.get("Content-Length") or 0)
                posts.append({"path": self.path, **json.loads(self.rfile.read(length))})
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Receiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as rx:
        yield rx


CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069]")


@pytest.mark.e2e
def test_notify_sends_one_per_episode_to_a_local_receiver(eval_runner: Any, tmp_path: Path,
                                                          receiver: Receiver) -> None:
    """A real eval (a repeated call, a submit loop whose claims end in hostile text) watched
    with ``--notify json://…``: the receiver gets exactly one notification per finding
    episode that reached ``high`` (the submit loop's, first ``medium``, when it crossed),
    none for lower ones or for ends and escalations, and agent text in it is marked, bounded
    and inert."""
    # the watch is up before the eval starts (with Apprise to import it used to start
    # after a fast eval had ended, on a busy machine: "no running Inspect evals found"),
    # and is stopped as Ctrl+C stops it once the eval has exited: queued sends go out
    out = tmp_path / "findings.jsonl"
    watcher = subprocess.Popen(
        [sys.executable, "-m", "watcher", "watch", "--follow", "--poll", "0.3", "--format",
         "jsonl", "-o", str(out), "--notify", f"json://127.0.0.1:{receiver.port}/inspect-watch",
         "--alert-drain", "300"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL, text=True, preexec_fn=default_sigint)
    try:
        while not out.exists():  # its outputs are open: the watch has begun
            assert watcher.poll() is None, watcher.communicate()[1]
            time.sleep(0.05)
        proc = eval_runner("loops", "-T", "hostile=true", tool_delay=0.1)
        assert proc.wait() == 0
        while not any(r.get("notice") == "process_exited" for r in _records(out)):
            assert watcher.poll() is None, watcher.communicate()[1]
            time.sleep(0.1)
        watcher.send_signal(signal.SIGINT)
        _, stderr = watcher.communicate(timeout=600)
    finally:
        if watcher.poll() is None:
            watcher.kill()
            watcher.wait()
    assert watcher.returncode == 130, stderr
    records = _records(out)
    findings = [r for r in records if r["kind"] == "finding"]
    high = {r["id"]: r for r in findings if r["confidence"] == "high" and r["status"] != "ended"}
    assert {r["rule"] for r in high.values()} >= {"repeated-tool-call", "submit-loop"}
    crossed = [r for r in findings if r["id"] in high and r["confidence"] == "medium"]
    assert crossed, "the submit loop is first reported at medium, then escalated"
    assert any(r["confidence"] != "high" for r in findings if r["id"] not in high)

    posts = receiver.posts
    ids = [m.group(1) for p in posts if (m := re.search(r"finding id (\w+)", p["message"]))]
    assert len(ids) == len(posts)  # no digest: under the rate limit
    assert sorted(ids) == sorted(high)  # exactly one per qualifying episode
    for p in posts:
        f = high[re.search(r"finding id (\w+)", p["message"]).group(1)]  # type: ignore[union-attr]
        assert p["path"] == "/inspect-watch" and p["type"] == "warning"
        assert p["title"].startswith(f"inspect-watch HIGH: {f['title']}")
        assert f"task loops · sample {f['sample_id']}" in p["title"]
        assert f"rule {f['rule']} ({f['category']})" in p["message"]
        assert p["message"].endswith(FOOTER)
        assert not CONTROL.search(p["title"] + p["message"].replace("\n", ""))
    [loop] = [p for p in posts if "rule submit-loop" in p["message"]]
    quoted = [ln for ln in loop["message"].split("\n") if ln.startswith(UNTRUSTED_LABEL)]
    assert quoted and all(len(ln) < EXCERPT_LEN + 80 for ln in quoted)
    assert "truncated" in quoted[0] and "My final answer is 42" in quoted[0]
    assert "@channel" not in loop["message"] and "<img" not in loop["message"]
    # the agent's fake heading stays inside a line the label (or the summary) begins
    assert not any(ln.lstrip().startswith("##") for ln in loop["message"].split("\n"))
    # what the agent wrote, as the JSONL keeps it (escaped), held all of that
    written = " ".join(t for r in findings if r["rule"] == "submit-loop"
                       for t in r["evidence"]["agent_text"])
    assert "@channel" in written and "<img" in written and "\x1b[2J" in written


def _fake(f: Finding, **kw: Any) -> Finding:
    return replace(f, **kw)


def test_notifier_once_per_episode_rate_limited_with_a_digest() -> None:
    """Escalation is not news unless it crosses the minimum; over the rate limit findings
    are held and go out as one digest when the minute allows, and at the end."""
    sent: list[tuple[str, str, str]] = []
    now = [1000.0]
    n = Notifier((), min_confidence="high", per_minute=2,
                 send=lambda t, b, k: sent.append((t, b, k)) is None, clock=lambda: now[0])
    base = example_snapshots()[0]  # medium, open
    n.finding(base)  # below the minimum
    crossed = _fake(base, confidence="high", status="escalated")
    n.finding(crossed)  # crosses it: sent
    n.finding(_fake(base, confidence="high", status="escalated", count=99))  # same episode
    n.finding(_fake(base, confidence="high", status="ended"))
    others = [_fake(base, id=f"id{i:014d}", confidence="high", sample=replace(
        base.sample, sample_id=f"s{i}")) for i in range(14)]
    for f in others:
        n.finding(f)
    deadline = time.time() + 10
    while len(sent) < 2 and time.time() < deadline:
        time.sleep(0.02)
    time.sleep(0.5)  # the worker has had its chance to send more: the limit says no
    assert [t for t, _, _ in sent] == [finding_title(crossed), finding_title(others[0])]
    assert "finding id " + base.id in sent[0][1]
    now[0] += 61  # the minute allows: the held 13 go out as one digest, the first 10 named
    while len(sent) < 3 and time.time() < deadline:
        time.sleep(0.02)
    assert sent[2][0] == "inspect-watch: 13 more finding(s) held back by the rate limit"
    assert all(f"id {f.id}" in sent[2][1] for f in others[1:11])
    assert f"id {others[11].id}" not in sent[2][1] and "- and 3 more" in sent[2][1]
    late = _fake(base, id="late0000000000000", confidence="high")
    n.finding(late)  # under the limit again (1 of 2 this minute)
    n.finding(_fake(late, id="late0000000000001"))  # over: held until the end
    n.drain(5)
    assert [t for t, _, _ in sent][3:] == [
        finding_title(late), "inspect-watch: 1 more finding(s) held back by the rate limit"]
    assert n.pop_notices() == []  # nothing lost


def test_notification_text_marks_and_bounds_agent_text() -> None:
    f = next(s for s in example_snapshots() if HOSTILE in s.evidence.excerpts)
    f = replace(f, evidence=replace(f.evidence, excerpts=(HOSTILE * 50, "@here <b>x</b>", "3rd")),
                summary="summary with @channel and \x1b[2J" + "x" * 5000)
    body, title = finding_body(f), finding_title(f)
    assert len(body) <= 1500 and len(title) <= 250
    assert not CONTROL.search(title + body.replace("\n", ""))
    assert "@" not in body.replace(FOOTER, "") and "<" not in body
    lines = body.split("\n")
    quoted = [ln for ln in lines if ln.startswith(f"{UNTRUSTED_LABEL}: «")]
    assert len(quoted) == 2 and "(+1 more excerpts" in body
    assert all(ln.endswith("»") for ln in quoted)
    assert not any(ln.startswith("## inspect-watch") for ln in lines)


def test_notify_without_apprise_says_how_to_install(monkeypatch: pytest.MonkeyPatch,
                                                    tmp_path: Path) -> None:
    from watcher.cli import main

    monkeypatch.setitem(sys.modules, "apprise", None)  # `import apprise` raises ImportError
    res = CliRunner().invoke(main, ["watch", "--log-dir", str(tmp_path), "--once",
                                    "--notify", "json://127.0.0.1:9/x"])
    assert res.exit_code == 2
    assert 'pip install "inspect-watch[notify]"' in res.output


def test_notify_refuses_an_unknown_url_without_echoing_it(tmp_path: Path) -> None:
    from watcher.cli import main

    res = CliRunner().invoke(main, ["watch", "--log-dir", str(tmp_path), "--once",
                                    "--notify", "nosuchservice://secret-token@host"])
    assert res.exit_code == 2
    assert "Apprise does not understand the URL nosuchservice://…" in res.output
    assert "secret-token" not in res.output


def test_a_watch_that_may_act_does_not_say_it_only_observes() -> None:
    """Under ``watch --act`` (``context.acting``) the footer says the watch acts as its
    policy says; without it, the observer's footer."""
    from types import SimpleNamespace

    from watcher.notify import FOOTER_ACTING

    f = _fake(example_snapshots()[0], confidence="high")
    for acting, footer in (("", FOOTER), ("act", FOOTER_ACTING), ("dry-run", FOOTER_ACTING)):
        sent: list[str] = []
        n = Notifier((), min_confidence="high",
                     send=lambda t, b, k, sent=sent: sent.append(b) is None)
        n.start(SimpleNamespace(acting=acting))
        n.finding(f)
        n.drain(5)
        assert len(sent) == 1 and sent[0].endswith(footer), acting
        assert ("only observes" in sent[0]) == (acting == "")


def test_agent_text_and_names_are_inert_in_chat_markup() -> None:
    """Discord, Mattermost, Google Chat and Slack render a plain-text body's Markdown
    anyway (issue 34, item 8): a link, a bare URL, emphasis or code from the agent or
    the dataset must reach them as text, still labelled untrusted."""
    f = example_snapshots()[0]
    hostile = ("[click here](https://evil.example/x) **URGENT** _now_ `rm -rf` ~~ok~~ "
               "<https://evil.example|ok> www.evil.example evil.example # all clear")
    f = replace(f, evidence=replace(f.evidence, excerpts=(hostile,)), summary=hostile,
                sample=replace(f.sample, task="t[x](http://a.b)", sample_id="**s**.example",
                               log_location="/logs/run_1/2026_loops.eval"))
    body, title = finding_body(f), finding_title(f)
    said = (body + title).replace(FOOTER, "")
    for live in ("](", "https://", "http://", "www.evil", "evil.example", "**", "__", "`",
                 "~~", "<", "# all", "|ok"):
        assert live not in said, live
    quoted = [ln for ln in body.split("\n") if ln.startswith(f"{UNTRUSTED_LABEL}: «")]
    assert quoted and "click here" in quoted[0]  # still readable
    assert "log: /logs/run_1/2026_loops.eval" in body  # the user's path, to copy


@pytest.mark.skipif(not (Path(__file__).parent / "corpus.py").exists(), reason="no corpus")
def test_what_the_alerts_say_as_the_watch_ends_is_written(tmp_path: Path) -> None:
    """The end's account of alerts not handled (queued, cut short) is routed as the alerts
    drain, after the watch's last flush: it reaches the JSONL too, not only the summary."""
    from tests.corpus import CORPUS

    log = CORPUS / "docent-intercode-ctf-gpt4o.eval"
    if not log.exists():
        pytest.skip(f"{log} is not here")
    out = tmp_path / "f.jsonl"
    res = subprocess.run(
        [sys.executable, "-m", "watcher", "watch", "--log-dir", str(log), "--once",
         "--format", "jsonl", "--output", str(out), "--on-finding", "sleep 60",
         "--alert-drain", "0.2", "-j", "1"],
        capture_output=True, text=True, timeout=600, preexec_fn=default_sigint)
    assert res.returncode in (0, 1), res.stderr
    records = [json.loads(line) for line in out.read_text().splitlines()]
    found = [r for r in records if r["kind"] == "finding"]
    ends = [r for r in records if r.get("notice") == "alert_dropped"
            and "submitted" in r["details"]]
    assert found and len(ends) == 1, [r.get("notice") for r in records]
    assert ends[0]["details"]["cut_short"] == 1
    assert ends[0]["details"]["submitted"] >= 1
