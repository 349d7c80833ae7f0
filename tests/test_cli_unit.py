"""CLI behaviour that needs no live eval: replay, suppression, bad input, exit codes."""

from __future__ import annotations

import json
import os
import resource
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from watcher.cli import main


def _fixture(tmp_path: Path) -> Path:
    path = tmp_path / "loop.jsonl"
    events = []
    for i in range(4):
        events.append({"event": "tool", "uuid": f"u{i}", "timestamp": 1000.0 + i,
                       "function": "bash", "arguments": '{"cmd": "cat /tmp/status"}',
                       "result": "waiting", "has_error": False, "pending": None})
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return path


def _rules(out: str) -> set[str]:
    return {json.loads(line)["rule"] for line in out.splitlines()
            if line.strip() and json.loads(line)["kind"] == "finding"}


def test_replay_finds_and_suppress_file_silences(tmp_path: Path) -> None:
    fixture = _fixture(tmp_path)
    res = CliRunner().invoke(main, ["replay", str(fixture), "--format", "jsonl"])
    assert res.exit_code == 0, res.output
    assert "repeated-tool-call" in _rules(res.output)
    supp = tmp_path / "suppress.yaml"
    supp.write_text("suppress:\n  - rule: repeated_tool_call\n    field: function\n"
                    "    op: equals\n    value: bash\n    reason: this task polls\n")
    res = CliRunner().invoke(main, ["replay", str(fixture), "--format", "jsonl",
                                    "--suppress", str(supp)])
    assert res.exit_code == 0, res.output
    assert not {r for r in _rules(res.output) if "repeat" in r}


def test_fail_on_sets_exit_code(tmp_path: Path) -> None:
    res = CliRunner().invoke(main, ["replay", str(_fixture(tmp_path)), "--format", "jsonl",
                                    "--fail-on", "high"])
    assert res.exit_code == 1


def test_invalid_rule_refuses_to_start_with_located_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("id: my-rule\ntitle: x\ndetect: {match: {}}\nseverty: warning\n")
    res = CliRunner().invoke(main, ["watch", "--once", "--rules", str(bad)])
    assert res.exit_code == 2
    assert f"{bad}:4:1" in res.output and "severity" in res.output  # did-you-mean


def test_corrupt_state_file_is_a_clear_error(tmp_path: Path) -> None:
    state = tmp_path / "s.json"
    state.write_text("{not json")
    res = CliRunner().invoke(main, ["watch", "--once", "--state", str(state)])
    assert res.exit_code == 2 and "cannot read state file" in res.output


def test_no_running_evals_is_a_notice_not_an_error(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("INSPECT_WATCH_CONTROL_DIR", str(tmp_path / "empty"))
    res = CliRunner().invoke(main, ["watch", "--once", "--no-color"])
    assert res.exit_code == 0 and "no running Inspect evals" in res.output


def test_outputs_that_cannot_be_written_refuse_to_start(tmp_path: Path) -> None:
    """A report path checked only at the end would cost the whole watch: each is checked
    before the watch starts, with the option named (exit 2, no traceback)."""
    logs = tmp_path / "logs"
    logs.mkdir()
    missing = tmp_path / "no" / "such"
    cases = [
        (["--output", str(missing / "f.jsonl")], "--output", "does not exist"),
        (["--format", "jsonl", "-o", str(missing / "f.jsonl")], "--output", "does not exist"),
        (["--summary", str(missing / "s.md")], "--summary", "does not exist"),
        (["--html", str(missing / "r.html")], "--html", "does not exist"),
        (["--output", str(tmp_path)], "--output", "is a directory"),
    ]
    for args, hint, why in cases:
        res = CliRunner().invoke(main, ["watch", "--log-dir", str(logs), "--once", *args])
        assert res.exit_code == 2, (args, res.output)
        assert hint in res.output and why in res.output, res.output
        assert "Traceback" not in res.output
    assert not missing.parent.exists()
    for cmd in (["report", str(tmp_path / "x.jsonl")], ["record", "t", "s"]):
        res = CliRunner().invoke(main, [*cmd, "--output", str(missing / "out")])
        assert res.exit_code == 2 and "does not exist" in res.output, (cmd, res.output)


def test_missing_log_dir_is_bad_input_and_an_empty_one_a_notice(tmp_path: Path) -> None:
    res = CliRunner().invoke(main, ["watch", "--log-dir", str(tmp_path / "typo"), "--once"])
    assert res.exit_code == 2 and "--log-dir" in res.output and "does not exist" in res.output
    empty = tmp_path / "empty"
    empty.mkdir()
    res = CliRunner().invoke(main, ["watch", "--log-dir", str(empty), "--once", "-q",
                                    "--format", "jsonl"])
    assert res.exit_code == 0, res.output
    notices = [json.loads(line) for line in res.output.splitlines()]
    assert [n["notice"] for n in notices] == ["no_logs"]


def test_report_of_a_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    res = CliRunner().invoke(main, ["report", str(tmp_path / "missing.jsonl")])
    assert res.exit_code == 3
    assert "cannot read" in res.output and "missing.jsonl" in res.output
    assert res.exception is None or isinstance(res.exception, SystemExit)


@pytest.mark.slow  # three scans of real logs
def test_full_disk_stops_the_watch_and_the_next_run_reports_what_was_lost(
        tmp_path: Path) -> None:
    """Findings written to a full device (/dev/full: every write fails with ENOSPC): the
    watch stops with exit 3 and a clear message, saves its state without marking the
    unwritten finding reported, and the next run with that state reports everything."""
    if not Path("/dev/full").exists():
        import pytest

        pytest.skip("no /dev/full here")
    import shutil

    from tests.corpus import CORPUS

    # two small real logs (the whole corpus, scanned three times, is minutes of CPU)
    logs = tmp_path / "logs"
    logs.mkdir()
    for name in ("docent-intercode-ctf-gpt4o.eval", "metr-oxdna-claude-opus.eval"):
        shutil.copy(CORPUS / name, logs / name)
    state = tmp_path / "state.json"
    args = ["watch", "--log-dir", str(logs), "--once", "-q", "--format", "jsonl",
            "--state", str(state)]
    for jobs in ("1", "2"):  # one process, and workers whose findings the parent writes
        res = CliRunner().invoke(main, [*args, "--jobs", jobs, "-o", "/dev/full"])
        assert res.exit_code == 3, res.output
        assert "cannot write findings" in res.output and "No space left" in res.output
        assert res.exception is None or isinstance(res.exception, SystemExit)
        saved = json.loads(state.read_text())
        assert saved["reported"] == {} and saved["finished"] == [], jobs
    out = tmp_path / "f.jsonl"
    res = CliRunner().invoke(main, [*args, "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert any(json.loads(line)["kind"] == "finding" for line in out.read_text().splitlines())


def test_only_and_disable_must_name_a_rule_or_category(tmp_path: Path) -> None:
    """A typo in --disable left the rule running; in --only it ran no rule at all, and the
    watch reported nothing, like a clean run. Both are bad input (W121), with a guess."""
    res = CliRunner().invoke(main, ["watch", "--once", "--disable", "submit-lop"])
    assert res.exit_code == 2
    assert "W121 unknown-selection" in res.output and "did you mean 'submit-loop'" in res.output
    res = CliRunner().invoke(main, ["watch", "--once", "--only", "shortcut,nosuchrule"])
    assert res.exit_code == 2 and "'nosuchrule' is no rule id or category" in res.output
    assert "'shortcut'" not in res.output  # a category is a valid --only
    res = CliRunner().invoke(main, ["rules", "list", "--only", "shortcut", "--json"])
    assert res.exit_code == 0, res.output


def test_replay_of_a_file_that_is_no_recording_is_a_located_error() -> None:
    bad = Path(__file__).parent / "data" / "replay_bad.jsonl"
    res = CliRunner().invoke(main, ["replay", str(bad)])
    assert res.exit_code == 2
    assert f"inspect-watch replay: {bad}:3: not JSON" in res.output
    assert res.exception is None or isinstance(res.exception, SystemExit)


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_task_or_sample_that_matches_nothing_is_said(jobs: str) -> None:
    """watch TASK [SAMPLE] over logs where nothing matches read nothing: a notice says
    so, where an empty output would look like a clean run. In a parallel scan only the
    parent can tell (a worker whose share lacked the sample once said it was missing)."""
    from tests.corpus import CORPUS

    def notices(*selector: str) -> list[dict]:
        res = CliRunner().invoke(main, ["watch", "--log-dir", str(CORPUS), *selector,
                                        "--once", "-q", "--format", "jsonl", "--jobs", jobs])
        rows = [json.loads(line) for line in res.output.splitlines()]
        found = [r for r in rows if r["kind"] == "notice" and r["notice"] == "no_match"]
        assert res.exit_code == (4 if found else 0), res.output  # a typo is no clean run
        return found

    [task] = notices("luce_intercode_ctf")  # the task's name is inspect_evals/luce_…
    assert "no task matching 'luce_intercode_ctf'" in task["message"]
    [sample] = notices("inspect_evals/luce_intercode_ctf", "no-such-sample")
    assert "no sample 'no-such-sample'" in sample["message"]
    assert notices("inspect_evals/luce_intercode_ctf", "56") == []


def _cli_limited(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The CLI in a subprocess with its address space capped at 2 GB and a time limit:
    an unbounded read hits MemoryError (not the machine's OOM killer), a blocked one
    the timeout, and either fails the test."""
    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    return subprocess.run([sys.executable, "-m", "watcher", *args], capture_output=True,
                          text=True, timeout=60, env={**os.environ, **env},
                          stdin=subprocess.DEVNULL, preexec_fn=cap)


@pytest.mark.slow  # a process per special file
def test_special_files_are_refused_not_read_for_ever(tmp_path: Path) -> None:
    """``--rules /dev/zero`` grew to 24 GB, ``--state /dev/full`` likewise, and a FIFO
    blocked the start: rule, suppress and state files must be regular files (exit 2,
    named, no traceback); a large regular rule file is read only up to the cap."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    big = tmp_path / "big.yaml"
    big.write_text("# padding\n" * 150_000)  # 1.5 MB, over the 1,000,000-byte cap
    env = {"INSPECT_WATCH_CONTROL_DIR": str(tmp_path / "none")}
    cases = [
        (["watch", "--once", "--rules", "/dev/zero"], "/dev/zero: W120",
         "not a regular file"),
        (["watch", "--once", "--rules", str(fifo)], f"{fifo}: W120", "not a regular file"),
        (["rules", "validate", "/dev/zero"], "/dev/zero: W120", "not a regular file"),
        (["watch", "--once", "--suppress", "/dev/zero"], "/dev/zero: W120",
         "not a regular file"),
        (["watch", "--once", "--rules", str(big)], f"{big}:1:1: W116",
         "larger than 1000000 bytes"),
        (["watch", "--once", "--state", "/dev/full"], "/dev/full: cannot read state file",
         "not a regular file"),
        (["watch", "--once", "--state", str(fifo)], f"{fifo}: cannot read state file",
         "not a regular file"),
    ]
    for args, where, why in cases:
        res = _cli_limited(*args, env=env)
        assert res.returncode == 2, (args, res.returncode, res.stderr[-2000:])
        assert where in res.stderr and why in res.stderr, (args, res.stderr)
        assert "Traceback" not in res.stderr
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_a_state_that_cannot_be_saved_refuses_to_start(tmp_path: Path) -> None:
    """The watch used to run and then lose its state at exit with a traceback: the state
    is saved once before the watch starts, and a path that cannot take it is exit 2."""
    logs = tmp_path / "logs"
    logs.mkdir()
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    res = CliRunner().invoke(main, ["watch", "--log-dir", str(logs), "--once", "-q",
                                    "--format", "jsonl", "--state", str(blocker / "s.json")])
    assert res.exit_code == 2, res.output
    assert f"{blocker / 's.json'}: cannot write state file: Not a directory" in res.output
    assert '"notice"' not in res.output  # the watch did not start
    assert res.exception is None or isinstance(res.exception, SystemExit)
    fresh = tmp_path / "new" / "s.json"  # a new state (and its directory) is fine
    res = CliRunner().invoke(main, ["watch", "--log-dir", str(logs), "--once", "-q",
                                    "--state", str(fresh)])
    assert res.exit_code == 0, res.output
    assert json.loads(fresh.read_text())["reported"] == {}


def test_symlinked_outputs_are_checked_where_they_point(tmp_path: Path) -> None:
    """A dangling --output symlink into a missing directory was a traceback (JSONL) after
    the rules loaded: it is checked up front like any path, where the link points; one
    into an existing directory is created there, as `> PATH` would, the link kept."""
    logs = tmp_path / "logs"
    logs.mkdir()
    dangling = tmp_path / "dangling.jsonl"
    dangling.symlink_to(tmp_path / "gone" / "f.jsonl")
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    for args, why in (
            (["--format", "jsonl", "-o", str(dangling)], "does not exist (where the symlink"),
            (["-o", str(dangling)], "does not exist (where the symlink"),
            (["--summary", str(dangling)], "does not exist (where the symlink"),
            (["--format", "jsonl", "-o", str(loop)], "is a symlink loop")):
        res = CliRunner().invoke(main, ["watch", "--log-dir", str(logs), "--once", *args])
        assert res.exit_code == 2, (args, res.output)
        assert why in res.output and "Traceback" not in res.output, (args, res.output)
        assert res.exception is None or isinstance(res.exception, SystemExit)
    ok = tmp_path / "ok.jsonl"
    ok.symlink_to(tmp_path / "target.jsonl")
    res = CliRunner().invoke(main, ["watch", "--log-dir", str(logs), "--once", "-q",
                                    "--format", "jsonl", "-o", str(ok)])
    assert res.exit_code == 0, res.output
    assert ok.is_symlink() and "no_logs" in (tmp_path / "target.jsonl").read_text()



@pytest.mark.slow  # a process per try
@pytest.mark.parametrize("fmt", ["jsonl", "text"])
def test_an_output_fifo_without_a_reader_is_refused_not_waited_for(tmp_path: Path,
                                                                   fmt: str) -> None:
    """``-o FIFO`` with nobody reading it blocked the start for ever (issue 34, item 15);
    with a reader it is written to."""
    import threading

    fifo = tmp_path / "findings.fifo"
    os.mkfifo(fifo)
    (tmp_path / "logs").mkdir()
    args = [sys.executable, "-m", "watcher", "watch", "--once", "--log-dir",
            str(tmp_path / "logs"), "--format", fmt, "-o", str(fifo)]
    res = subprocess.run(args, capture_output=True, text=True, timeout=60,
                         stdin=subprocess.DEVNULL)
    assert res.returncode == 2 and "a FIFO that nobody reads yet" in res.stderr
    got: list[bytes] = []  # a reader (blocked in open until the watch opens it)
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    # the reader may not have opened it yet: the watch is then refused again, and tried
    # until it finds the reader (no fixed wait)
    for _ in range(100):
        res = subprocess.run(args, capture_output=True, text=True, timeout=60,
                             stdin=subprocess.DEVNULL)
        if res.returncode != 2:
            break
    reader.join(30)
    assert res.returncode == 0, res.stderr
    assert b"no Inspect logs" in got[0]
