"""Installing inspect-watch takes no model name away from a user.

The scripted model is registered only by the task files that import
``watcher.scripted``, under this project's own provider name; our one ``inspect_ai``
entry point (the Scout scanner's) registers no model API. A user's own model API
named ``scripted`` (a common name for a test model), registered the way Inspect
extensions are, through an ``inspect_ai`` entry point of the user's package, keeps
answering ``--model scripted/...``: before, inspect-watch's entry point registered a
``scripted`` API too, Inspect loaded both, and ours replaced the user's.
"""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from importlib.metadata import entry_points
from pathlib import Path

import pytest

USER_MODELS = '''
from inspect_ai.model import ModelOutput, modelapi
from inspect_ai.model._providers.mockllm import MockLLM


@modelapi(name="scripted")
def users_scripted():
    class UsersScripted(MockLLM):
        def __init__(self, model_name, **kwargs):
            kwargs.pop("custom_outputs", None)
            super().__init__(model_name, custom_outputs=[
                ModelOutput.from_content("scripted/mine", "the user's own model answered")
            ] * 5, **kwargs)

        async def count_text_tokens(self, text):
            return max(1, len(text) // 4)

    return UsersScripted
'''

USER_TASK = '''
from inspect_ai import Task, task
from inspect_ai.dataset import Sample
from inspect_ai.scorer import includes
from inspect_ai.solver import generate


@task
def mine():
    return Task(dataset=[Sample(input="hello", target="own model")], solver=generate(),
                scorer=includes())
'''


def test_our_only_inspect_entry_point_registers_our_names_alone() -> None:
    """An ``inspect_ai`` entry point is imported into every eval on the machine: ours is the
    Scout scanner's, named ``inspect_watch``, and registers nothing but ``inspect_watch/``
    names (no model API)."""
    ours = [e for e in entry_points(group="inspect_ai")
            if e.value.startswith(("watcher", "inspect_watch"))]
    assert [(e.name, e.value) for e in ours] in ([], [("inspect_watch",
                                                        "inspect_watch._registry")])
    from inspect_ai._util.registry import registry_find

    for e in ours:
        e.load()
    assert not registry_find(lambda info: info.type == "modelapi"
                             and "inspect_watch" in info.name
                             and info.name != "inspect_watch_scripted")


def test_provider_name_is_ours_alone() -> None:
    from watcher.scripted import PROVIDER

    assert PROVIDER == "inspect_watch_scripted"


def _user_package(site: Path) -> None:
    """A user's installed package registering a ``scripted`` model API, as Inspect
    extensions do (an ``inspect_ai`` entry point)."""
    (site / "user_models").mkdir(parents=True)
    (site / "user_models" / "__init__.py").write_text(USER_MODELS)
    info = site / "user_models-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: user-models\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[inspect_ai]\nuser_models = user_models\n")


@pytest.mark.e2e
def test_a_users_scripted_model_is_not_shadowed(tmp_path: Path) -> None:
    _user_package(tmp_path / "site")
    (tmp_path / "mine.py").write_text(USER_TASK)
    logs = tmp_path / "logs"
    got = subprocess.run(
        [sys.executable, "-m", "inspect_ai._cli.main", "eval", "mine.py@mine",
         "--model", "scripted/mine", "--log-dir", str(logs), "--display", "none"],
        cwd=tmp_path, capture_output=True, text=True, timeout=240,
        env={"XDG_DATA_HOME": str(tmp_path / "data"), "PATH": "/usr/bin:/bin",
             "HOME": str(tmp_path), "INSPECT_LOG_LEVEL": "warning",
             "PYTHONPATH": str(tmp_path / "site")})
    assert got.returncode == 0, got.stdout[-3000:] + got.stderr[-3000:]
    [log] = logs.glob("*.eval")
    import zipfile_zstd  # noqa: F401  (registers zstd with zipfile)

    with zipfile.ZipFile(log) as z:
        [name] = [n for n in z.namelist() if n.startswith("samples/")]
        sample = json.loads(z.read(name))
    assert sample["output"]["completion"] == "the user's own model answered"
