"""The ``--state`` file: saved before what it marks reported is written, locked, bounded."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from watcher.cli import main
from watcher.engine import Engine, load_rules
from watcher.findings import Finding, Notice
from watcher.run.watch import Watch, WatchConfig
from watcher.state import StateError, WatchState


def _loop_fixture(tmp_path: Path, samples: int = 3) -> list[str]:
    """Recordings (plain event lists) with a repeated tool call each."""
    paths = []
    for s in range(samples):
        path = tmp_path / f"loop{s}.jsonl"
        events = [{"event": "tool", "uuid": f"u{s}-{i}", "timestamp": 1000.0 + i,
                   "function": "bash", "arguments": f'{{"cmd": "cat /tmp/status{s}"}}',
                   "result": "waiting", "has_error": False, "pending": None}
                  for i in range(6)]
        path.write_text("".join(json.dumps(e) + "\n" for e in events))
        paths.append(str(path))
    return paths


class DiskProbe:
    """A reporter that, as each finding reaches it, reads the state file from disk."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.findings: list[Finding] = []
        self.unsaved: list[str] = []

    def finding(self, f: Finding) -> None:
        self.findings.append(f)
        saved = json.loads(self.path.read_text()) if self.path.exists() else {}
        if f.id not in saved.get("reported", {}):
            self.unsaved.append(f.id)

    def notice(self, n: Notice) -> None: ...
    def status(self, snapshot: Any) -> None: ...


def test_a_finding_is_saved_before_it_is_written(tmp_path: Path) -> None:
    """The state used to be saved only at exit: a watcher killed outright re-reported every
    finding (5,421 in the issue) when resumed. Each finding is in the state file on disk
    by the time a reporter receives it."""
    state_path = tmp_path / "state.json"
    probe = DiskProbe(state_path)
    engine = Engine(load_rules(builtin=True, user_dir=False))
    watch = Watch(engine, WatchConfig(replay=_loop_fixture(tmp_path), poll=0.05),
                  WatchState(path=state_path), [probe])
    watch.run()
    assert len({f.sample.task for f in probe.findings}) == 3, probe.findings
    assert probe.unsaved == []
    # and the samples read to their end are remembered with them
    assert len(json.loads(state_path.read_text())["finished"]) == 3


def test_a_second_watcher_on_one_state_is_refused(tmp_path: Path) -> None:
    """Two watchers sharing one --state overwrote each other's saves and one re-reported
    12,000 lines: the state is locked, and a second watcher is bad input (exit 2)."""
    path = tmp_path / "s.json"
    first = WatchState.open(path)
    try:
        with pytest.raises(StateError, match=r"another watcher \(pid \d+\) is using"):
            WatchState.open(path)
        link = tmp_path / "link.json"  # the same state by another name: the same lock
        link.symlink_to(path)
        res = CliRunner().invoke(main, ["watch", "--log-dir", str(tmp_path), "--once",
                                        "--state", str(link)])
        assert res.exit_code == 2, res.output
        assert "another watcher" in res.output and "give each its own --state" in res.output
    finally:
        first.close()
    again = WatchState.open(path)  # released: the next watcher takes it
    again.close()


def test_a_state_that_can_no_longer_be_saved_stops_the_watch(tmp_path: Path) -> None:
    """Saved as the watch goes, the state can fail to save mid-run (here its directory is
    replaced by a file):
    the watch stops (exit 3) and reports nothing the state could not remember."""
    import shutil

    home = tmp_path / "home"
    home.mkdir()
    state_path = home / "state.json"

    class Saboteur(DiskProbe):
        saved: set[str] | None = None  # what the state held when it was sabotaged

        def finding(self, f: Finding) -> None:
            self.findings.append(f)
            if self.saved is None:
                self.saved = set(json.loads(state_path.read_text())["reported"])
                shutil.rmtree(home)
                home.write_text("")
            if f.id not in self.saved:
                self.unsaved.append(f.id)

    probe = Saboteur(state_path)
    engine = Engine(load_rules(builtin=True, user_dir=False))
    result = Watch(engine, WatchConfig(replay=_loop_fixture(tmp_path), poll=0.05),
                   WatchState(path=state_path), [probe]).run()
    assert result.exit_code == 3 and result.state_error is not None
    assert "Not a directory" in result.state_error
    assert probe.findings and probe.unsaved == []  # none written that the state lacked


# -- hostile and newer state files (issue 34, item 11) -------------------------------------


@pytest.mark.parametrize("text,reason", [
    ('{"version": 1, "reported": {"x": ["high", "open", 1e400]}}', "count must be a whole"),
    ('{"version": 1, "reported": {"x": ["high", "open", -1]}}', "count must be a whole"),
    ('{"version": 1, "reported": {"x": ["certain", "open", 2]}}', "unknown level"),
    ('{"version": true}', "unsupported state version True"),
    ('{"version": 1.0}', "unsupported state version 1.0"),
    ('[1]', "not a JSON object"),
])
def test_a_hostile_state_is_a_located_error(tmp_path: Path, text: str, reason: str) -> None:
    path = tmp_path / "state.json"
    path.write_text(text)
    with pytest.raises(StateError, match=reason):
        WatchState.load(path)
    res = CliRunner().invoke(main, ["watch", "--once", "--log-dir", str(tmp_path),
                                    "--state", str(path)])
    assert res.exit_code == 2 and "cannot read state file" in res.output
    assert res.exception is None or isinstance(res.exception, SystemExit)


def test_keys_a_newer_watcher_wrote_are_kept_at_the_next_save(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_text(json.dumps({"version": 1, "reported": {"x": ["high", "open", 3]},
                                "budget": {"spent": 12}, "notes": ["keep me"]}))
    state = WatchState.open(path)
    state.finished.add("e|s|1")
    state.save()
    state.close()
    saved = json.loads(path.read_text())
    assert saved["budget"] == {"spent": 12} and saved["notes"] == ["keep me"]
    assert saved["reported"] == {"x": ["high", "open", 3]} and saved["finished"] == ["e|s|1"]
