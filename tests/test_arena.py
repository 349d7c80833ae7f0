"""The command line asks glibc for one malloc arena, unless the user set one."""

from __future__ import annotations

import platform
import sys

import pytest
from click.testing import CliRunner

from watcher import arena, cli

GLIBC = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"


@pytest.mark.skipif(not GLIBC, reason="mallopt is glibc's")
def test_one_arena_is_set_on_glibc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    assert arena.one_malloc_arena() is True


def test_the_users_setting_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert arena.one_malloc_arena() is False


def test_every_command_sets_it_before_it_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    monkeypatch.setattr(cli, "one_malloc_arena", lambda: calls.append("arena") or True)
    res = CliRunner().invoke(cli.main, ["rules", "list"])
    assert res.exit_code == 0, res.output
    assert calls == ["arena"]
