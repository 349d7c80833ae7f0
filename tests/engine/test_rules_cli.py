"""``rules`` commands: output, JSON, JUnit and exit codes."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

from click.testing import CliRunner

from watcher.rules_cli import rules

RULES = Path(__file__).parents[2] / "rules"
BROKEN = Path(__file__).parent / "broken"


def invoke(*args: str, env: dict[str, str] | None = None) -> object:
    return CliRunner().invoke(rules, list(args), env=env)


def isolated(tmp_path: Path) -> dict[str, str]:
    """No user rules from the real home directory."""
    return {"XDG_CONFIG_HOME": str(tmp_path / "cfg")}


def test_list_text_and_json(tmp_path: Path) -> None:
    res = invoke("list", env=isolated(tmp_path))
    assert res.exit_code == 0, res.output  # type: ignore[attr-defined]
    assert "repeated-tool-call" in res.output and "NEEDS" in res.output  # type: ignore
    res = invoke("list", "--json", "--only", "error-storm", env=isolated(tmp_path))
    data = json.loads(res.output)  # type: ignore[attr-defined]
    assert [r["id"] for r in data["rules"]] == ["error-storm"]
    assert data["rules"][0]["needs"] == "metadata"
    res = invoke("list", "--json", "--only", "error_storm", env=isolated(tmp_path))
    rows = json.loads(res.output)["rules"]  # type: ignore[attr-defined]
    assert rows and all(r["category"] == "error_storm" for r in rows)


def test_show(tmp_path: Path) -> None:
    res = invoke("show", "submit-loop", env=isolated(tmp_path))
    assert res.exit_code == 0  # type: ignore[attr-defined]
    out = res.output  # type: ignore[attr-defined]
    assert "Confidence" in out and "False positives" in out and "What to do" in out
    res = invoke("show", "submit-lop", env=isolated(tmp_path))
    assert res.exit_code == 1 and "did you mean 'submit-loop'" in res.output  # type: ignore


def test_validate_ok_and_broken(tmp_path: Path) -> None:
    res = invoke("validate", str(RULES / "error-storm.yaml"))
    assert res.exit_code == 0 and "ok: 1 rule(s) valid" in res.output  # type: ignore
    res = invoke("validate", str(BROKEN / "bad-regex.yaml"), str(BROKEN / "bad-id.yaml"))
    assert res.exit_code == 2  # type: ignore[attr-defined]
    assert "W106 bad-regex" in res.output and "W118 bad-id" in res.output  # type: ignore
    res = invoke("validate", "--json", str(BROKEN / "bad-regex.yaml"))
    data = json.loads(res.output)  # type: ignore[attr-defined]
    assert res.exit_code == 2 and data["errors"][0]["code"] == "W106"  # type: ignore


def test_test_pass_and_junit(tmp_path: Path) -> None:
    junit = tmp_path / "j.xml"
    res = invoke("test", str(RULES / "submit-loop.yaml"), "--junit", str(junit))
    assert res.exit_code == 0, res.output  # type: ignore[attr-defined]
    assert "PASS submit-loop" in res.output  # type: ignore[attr-defined]
    root = ET.parse(junit).getroot()
    assert root.get("failures") == "0" and int(root.get("tests") or 0) >= 4


def test_test_failure_exit_code(tmp_path: Path) -> None:
    bad = tmp_path / "wrong.yaml"
    bad.write_text((RULES / "error-storm.yaml").read_text()
                   .replace("id: error-storm", "id: wrong-expect")
                   .replace("expect: [{count: 5, confidence: medium}]",
                            "expect: [{count: 4, confidence: high}]"))
    junit = tmp_path / "j.xml"
    res = invoke("test", str(bad), "--junit", str(junit))
    assert res.exit_code == 1  # type: ignore[attr-defined]
    assert "FAIL wrong-expect :: five failures in a row" in res.output  # type: ignore
    assert "count: expected 4, got 5" in res.output  # type: ignore[attr-defined]
    assert ET.parse(junit).getroot().get("failures") == "1"


def test_test_with_broken_rules_exits_2(tmp_path: Path) -> None:
    res = invoke("test", str(BROKEN / "bad-template.yaml"))
    assert res.exit_code == 2  # type: ignore[attr-defined]


def _schema_validator() -> object:
    import jsonschema

    res = invoke("schema")
    assert res.exit_code == 0, res.output  # type: ignore[attr-defined]
    schema = json.loads(res.output)  # type: ignore[attr-defined]
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def _docs(path: Path) -> list[dict]:
    import yaml

    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def test_schema_accepts_every_builtin_document() -> None:
    validator = _schema_validator()
    docs = [d for f in sorted(RULES.glob("*.yaml")) for d in _docs(f)]
    assert len(docs) > 25 and any("lists" in d for d in docs)
    for doc in docs:
        errors = [e.message for e in validator.iter_errors(doc)]  # type: ignore[attr-defined]
        assert not errors, (doc.get("id"), errors)


def test_schema_rejects_broken_documents() -> None:
    validator = _schema_validator()
    # what a schema can see: unknown keys, wrong types, values out of their sets, missing
    # fields, a bad id, parameters out of bounds; each of these files holds only such rules
    for name in ("unknown-key", "wrong-type", "bad-value", "missing-field", "bad-id",
                 "unknown-fact", "bad-test"):
        for doc in _docs(BROKEN / f"{name}.yaml"):
            assert not validator.is_valid(doc), name  # type: ignore[attr-defined]
    bad_params = _docs(BROKEN / "bad-detector-params.yaml")
    # two detectors in one rule, a negative window and a similarity below 50 (the first
    # rule's window shorter than its count needs two parameters at once: the loader's)
    assert [validator.is_valid(d) for d in bad_params] == [True, False, False]  # type: ignore
    ok = _docs(RULES / "repeated-tool-call.yaml")[0]
    assert validator.is_valid(ok)  # type: ignore[attr-defined]
    for broken in ({**ok, "detect": {"repeat": {**ok["detect"]["repeat"], "count": 1}}},
                   {**ok, "detect": {"repeat": {"key": "x", "count": 3}}},
                   {**ok, "detect": {"cycle": {}}},
                   {**{k: v for k, v in ok.items() if k != "events"}}):
        assert not validator.is_valid(broken), broken  # type: ignore[attr-defined]
