"""The Inspect Scout scanner ``inspect_watch/rules`` finds what ``watch --log-dir`` finds.

The end-to-end tests run the real ``scout scan`` (and ``inspect eval --scanner``) over
real logs (the shared corpus: the two small logs and a few SWE-bench samples, picked
with Scout's own filter to keep the CPU cost low), read the results back with Scout's
results reader, and compare each finding episode with the last snapshot
``inspect-watch watch --log-dir LOG --once --format jsonl`` reports for it, run live
beside it (no stored snapshot: a rule change shows on both sides or fails here).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from inspect_scout import Transcript, scan_results_df  # the test extra installs Scout

from tests.corpus import CORPUS
from tests.evalproc import start_eval
from watcher.scout import (
    FLAG_SCANNER_NAME,
    QUOTE_LEN,
    SCANNER_NAME,
    ScannerArgsError,
    ScanOptions,
    rule_pack,
    scan_results,
)

CTF = CORPUS / "docent-intercode-ctf-gpt4o.eval"
OXDNA = CORPUS / "metr-oxdna-claude-opus.eval"
SWE = CORPUS / "mswe-gemini3pro-swebench-replay.eval"
# between them these raise every rule the pack finds in that log; the last raises none
SWE_SAMPLES = ("pytest-dev__pytest-7324", "django__django-11087", "psf__requests-5414",
               "sphinx-doc__sphinx-10435")

Key = tuple[str, int, str, str, int]  # (sample id, epoch, rule, confidence, count)


def _env(tmp: Path) -> dict[str, str]:
    """No user rules (an empty config dir) and private data dirs, for both programs."""
    env = dict(os.environ)
    for var in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME"):
        (tmp / var).mkdir(exist_ok=True)
        env[var] = str(tmp / var)
    env.pop("SCOUT_SCAN_ARGS", None)
    return env


def watch_findings(log: Path, env: dict[str, str], *options: str,
                   samples: tuple[str, ...] | None = None) -> dict[str, Key]:
    """Finding id -> key of its last snapshot, from ``watch --log-dir LOG --once``."""
    res = subprocess.run([sys.executable, "-m", "watcher", "watch", "--log-dir", str(log),
                          "--once", "--format", "jsonl", *options],
                         capture_output=True, text=True, env=env, timeout=300, check=False)
    assert res.returncode == 0, res.stderr[-3000:]
    last: dict[str, dict[str, Any]] = {}
    for line in res.stdout.splitlines():
        record = json.loads(line)
        if record["kind"] == "finding":
            last[record["id"]] = record
    return {fid: (d["sample_id"], d["epoch"], d["rule"], d["confidence"], d["count"])
            for fid, d in last.items() if samples is None or d["sample_id"] in samples}


def scout_scan(tmp: Path, env: dict[str, str], logs: list[Path], *args: str,
               scanner: str = SCANNER_NAME) -> Path:
    """``scout scan inspect_watch/rules -T LOG …`` (one process); the scan's directory."""
    scans = tmp / f"scans{len(list(tmp.glob('scans*')))}"
    cmd = [sys.executable, "-m", "inspect_scout._cli.main", "scan", scanner]
    for log in logs:
        cmd += ["-T", str(log)]
    cmd += ["--scans", str(scans), "--max-processes", "1", "--display", "plain", *args]
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp, timeout=600,
                         check=False)
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
    (scan,) = scans.glob("scan_id=*")
    return scan


def scout_findings(scan: Path) -> tuple[dict[str, Key], Any]:
    """Finding id -> key, and the rows, from Scout's results reader."""
    results = scan_results_df(str(scan))
    assert results.complete
    assert results.errors == []
    df = results.scanners["rules"]
    df = df[df["label"].notna()]
    found = {r["metadata.finding_id"]: (str(r["metadata.sample_id"]), int(r["metadata.epoch"]),
                                        r["label"], r["value"], int(r["metadata.count"]))
             for _, r in df.iterrows()}
    assert len(found) == len(df), "one result per finding episode"
    return found, df


@pytest.mark.e2e
def test_scout_scan_finds_what_watch_finds(tmp_path: Path) -> None:
    env = _env(tmp_path)
    want = watch_findings(CTF, env) | watch_findings(OXDNA, env)
    want_swe = watch_findings(SWE, env, samples=SWE_SAMPLES)
    rules = {k[2] for k in [*want.values(), *want_swe.values()]}
    # sample rules (the listing row, the task context) and event rules both take part
    assert {"token-outlier", "sample-limit", "repeated-call-twice", "shortcut-tamper-tests",
            "repeated-tool-call"} <= rules
    assert "sphinx-doc__sphinx-10435" not in {k[0] for k in want_swe.values()}

    got, df = scout_findings(scout_scan(tmp_path, env, [CTF, OXDNA]))
    assert got == want
    picked = "task_id IN (" + ", ".join(f"'{s}'" for s in SWE_SAMPLES) + ")"
    got_swe, df_swe = scout_findings(scout_scan(tmp_path, env, [SWE], "-F", picked))
    assert got_swe == want_swe
    assert set(df_swe["transcript_task_id"]) == set(SWE_SAMPLES[:3])  # the fourth: no result

    # what each result carries besides the key
    for _, row in df.iterrows():
        assert row["value"] == row["metadata.confidence"]
        assert row["metadata.clock_rules_skipped"] == ["stalled-sample"]
        assert row["metadata.sample_rules_context"] == "log"
        assert row["metadata.confidence_reason"] in row["explanation"]
        evidence = row["metadata.evidence"]
        refs = json.loads(row["event_references"])
        # the old CTF log has no event uuids; Scout gives each event one, and the
        # references name the events the finding rests on, cited in the explanation
        assert [r["id"] for r in refs] == list(dict.fromkeys(evidence["event_uuids"]))
        for ref in refs:
            assert ref["cite"] in row["explanation"]
        for text in evidence["agent_text"]:
            if len(text) > QUOTE_LEN:  # quoted in short code spans, never a long one whole
                assert text not in row["explanation"]
    assert any(json.loads(r) for r in df["event_references"])


def _lead(findings: list[dict[str, Any]]) -> dict[str, Any]:
    """The finding a boolean row is labelled with (the surest, the most severe, the
    earliest), computed here from the JSONL, independently of the scanner's code."""
    conf = {"low": 0, "medium": 1, "high": 2}
    sev = {"info": 0, "warning": 1, "critical": 2}
    return min(findings, key=lambda d: (-conf[d["confidence"]], -sev[d["severity"]],
                                        d["first_seen"], d["rule"], d["episode"]))


def watch_last(log: Path, env: dict[str, str], *options: str) -> list[dict[str, Any]]:
    """The last snapshot of each finding ``watch --log-dir LOG --once`` reports."""
    res = subprocess.run([sys.executable, "-m", "watcher", "watch", "--log-dir", str(log),
                          "--once", "--format", "jsonl", *options],
                         capture_output=True, text=True, env=env, timeout=300, check=False)
    assert res.returncode == 0, res.stderr[-3000:]
    last: dict[str, dict[str, Any]] = {}
    for line in res.stdout.splitlines():
        record = json.loads(line)
        if record["kind"] == "finding":
            last[record["id"]] = record
    return list(last.values())


def steward_python() -> str | None:
    """A Python with Inspect Steward (it needs 3.12): this one, or
    ``INSPECT_WATCH_STEWARD_PYTHON`` (docs/scout.md, "Inspect Steward")."""
    given = os.environ.get("INSPECT_WATCH_STEWARD_PYTHON")
    if given:
        return given
    import importlib.util

    return sys.executable if importlib.util.find_spec("inspect_steward") else None


def medium_findings(env: dict[str, str]) -> dict[str, list[dict[str, Any]]]:
    """Sample id -> what ``watch`` finds at medium or above in the CTF log."""
    by_sample: dict[str, list[dict[str, Any]]] = {}
    for d in watch_last(CTF, env, "--min-confidence", "medium"):
        if d["confidence"] != "low":
            by_sample.setdefault(d["sample_id"], []).append(d)
    assert len(by_sample) >= 3
    return by_sample


@pytest.mark.e2e
def test_the_boolean_scanner_answers_yes_or_no_per_transcript(tmp_path: Path) -> None:
    """``inspect_watch/rules_flag``: one boolean row per transcript, ``true`` exactly for
    the samples where ``watch`` finds something at medium or above, labelled with its
    surest finding's rule, every finding in the explanation and the metadata."""
    env = _env(tmp_path)
    by_sample = medium_findings(env)
    results = scan_results_df(str(scout_scan(tmp_path, env, [CTF], scanner=FLAG_SCANNER_NAME)))
    assert results.complete and results.errors == []
    df = results.scanners["rules_flag"]
    assert set(df["value_type"]) == {"boolean"}
    assert len(df) == len(set(df["transcript_task_id"])) == 15  # every transcript answered
    for _, row in df.iterrows():
        sid = str(row["transcript_task_id"])
        mine = by_sample.get(sid, [])
        meta = json.loads(row["metadata"])  # rows of two shapes: Scout keeps it whole
        assert bool(row["value"]) is bool(mine), sid
        assert meta["scanner"] == FLAG_SCANNER_NAME and meta["min_confidence"] == "medium"
        if not mine:
            assert pd_missing(row["label"]) and meta["findings"] == []
            continue
        lead = _lead(mine)
        assert row["label"] == lead["rule"] == meta["rule"]
        assert meta["confidence"] == lead["confidence"] and meta["finding_id"] == lead["id"]
        assert sorted(f["finding_id"] for f in meta["findings"]) == sorted(
            d["id"] for d in mine)
        for d in mine:
            assert f"{d['rule']}: " in row["explanation"]


@pytest.mark.e2e
def test_inspect_steward_reads_the_boolean_scanner_as_anomalies(tmp_path: Path) -> None:
    """Inspect Steward's own reading code (``scan_findings``, what its tend runs over a
    run's scan directory) takes the boolean rows as anomaly instances, one per flagged
    sample, classed by rule; and passes over every row of the confidence-valued scanner.
    Steward needs Python 3.12: the test runs its code under the Python that has it."""
    python = steward_python()
    if python is None:
        pytest.skip("Inspect Steward is not installed here: it needs Python 3.12 (this is "
                    f"{sys.version_info.major}.{sys.version_info.minor}); set "
                    "INSPECT_WATCH_STEWARD_PYTHON to a Python 3.12 with inspect-steward, "
                    "or see docs/scout.md \"Inspect Steward\" for the manual check")
    env = _env(tmp_path)
    by_sample = medium_findings(env)
    flag_scan = scout_scan(tmp_path, env, [CTF], scanner=FLAG_SCANNER_NAME)
    plain = scout_scan(tmp_path, env, [CTF])
    reader = Path(__file__).with_name("steward_read.py")

    def steward(scan: Path, scanner: str) -> dict[str, Any]:
        res = subprocess.run([python, str(reader), str(scan), scanner, str(CTF)],
                             capture_output=True, text=True, timeout=300, check=False)
        assert res.returncode == 0, res.stderr[-3000:]
        return dict(json.loads(res.stdout.splitlines()[-1]))

    flagged = steward(flag_scan, "rules_flag")
    assert flagged["unreadable"] == [] and flagged["recorded"] == 15
    assert {(i["sample_id"], i["class_key"].split(":")[2]) for i in flagged["instances"]} == {
        (sid, _lead(ds)["rule"]) for sid, ds in by_sample.items()}
    assert all(i["class_key"].startswith("scan:rules_flag:") for i in flagged["instances"])
    # the confidence-valued scanner is passed over, as the issue said: none escalated
    assert steward(plain, "rules")["instances"] == []


def pd_missing(value: Any) -> bool:
    import pandas as pd

    return bool(pd.isna(value))


EXTRA_RULES = """\
id: scout-test-bash
title: Runs bash
description: Every bash call, one episode (a rule of the test's own).
category: test_custom
severity: info
events: [tool]
needs: content
type: tool
field: function
equals: bash
detect:
  match: {}
confidence:
  base: medium
  reason: Every bash call counts.
message: "{count} bash calls"
---
id: repeated-call-twice
title: Same call twice (the test's stricter copy)
description: Replaces the built-in rule of this id, at medium confidence.
category: repeated_tool_call
severity: info
events: [tool]
needs: content
type: tool
detect:
  repeat:
    key: "[function, arguments, result, error]"
    count: 2
    window: {events: 6}
confidence:
  base: medium
  reason: Replaced by the test.
message: "{tool} twice: {excerpt}"
"""


@pytest.mark.e2e
def test_scanner_arguments_are_the_watch_options(tmp_path: Path) -> None:
    """``-S rules=`` / ``only=`` / ``disable=`` / ``min_confidence=`` select what ``--rules``,
    ``--only``, ``--disable`` and ``--min-confidence`` select."""
    env = _env(tmp_path)
    extra = tmp_path / "extra.yaml"
    extra.write_text(EXTRA_RULES, encoding="utf-8")
    want = watch_findings(OXDNA, env, "--rules", str(extra), "--only",
                          "repeated_tool_call,test_custom", "--disable", "repeated-tool-call",
                          "--min-confidence", "medium")
    assert {k[2] for k in want.values()} == {"scout-test-bash", "repeated-call-twice"}
    assert {k[3] for k in want.values()} == {"medium"}
    got, _ = scout_findings(scout_scan(
        tmp_path, env, [OXDNA], "-S", f"rules={extra}", "-S", "only=repeated_tool_call,test_custom",
        "-S", "disable=repeated-tool-call", "-S", "min_confidence=medium"))
    assert got == want


@pytest.mark.e2e
def test_invalid_rules_stop_the_scan_with_their_location(tmp_path: Path) -> None:
    env = _env(tmp_path)
    bad = tmp_path / "bad.yaml"
    bad.write_text("id: bad-rule\ntitle: x\ncategory: custom\nseverity: info\n"
                   "events: [tool]\nneeds: content\ndetect:\n  repeat: {count: 2}\n")
    res = subprocess.run([sys.executable, "-m", "inspect_scout._cli.main", "scan", SCANNER_NAME,
                          "-T", str(OXDNA), "-S", f"rules={bad}", "--scans",
                          str(tmp_path / "scans"), "--max-processes", "1"],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300,
                         check=False)
    out = res.stdout + res.stderr
    flat = " ".join(out.split())  # Scout's console wraps long lines
    assert res.returncode != 0
    assert f"{bad}:8:11: W111" in flat and "'key' [rule bad-rule]" in flat, out[-2000:]
    assert "Traceback" not in out
    assert not list((tmp_path / "scans").glob("scan_id=*/*.parquet"))


@pytest.mark.e2e
def test_inspect_eval_scanner_per_sample(tmp_path: Path) -> None:
    """``inspect eval --scanner inspect_watch/rules`` scans each sample as it completes
    (Inspect resolves the name before it imports Scout: the entry point's stand-in)."""
    env = _env(tmp_path)
    proc = start_eval(tmp_path, "loops", "--scanner", SCANNER_NAME,
                      env={k: env[k] for k in ("XDG_CONFIG_HOME", "XDG_CACHE_HOME")})
    assert proc.wait() == 0, proc.output.read_text()[-3000:]
    (log,) = proc.logs()
    want = watch_findings(log, env)
    assert {k[0] for k in want.values()} == {"repeat", "submit-loop"}
    (scan,) = (proc.log_dir / "scans").glob("scan_id=*")
    got, _ = scout_findings(scan)
    assert got == want


@pytest.mark.e2e
def test_entry_point_registers_only_our_name_and_imports_nothing_heavy() -> None:
    """Inspect loads every ``inspect_ai`` entry point into every eval: ours must not bring
    Scout (a second of imports) or the watcher along, nor register a name not ours."""
    code = (
        "import sys\n"
        "from inspect_ai._util import registry\n"
        "before = set(registry._registry)\n"
        "from inspect_ai._util.entrypoints import ensure_entry_points\n"
        "ensure_entry_points('inspect_watch')\n"
        "print(sorted(set(registry._registry) - before))\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('inspect_scout', 'watcher', 'inspect_watch')))\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True)
    added, modules = (eval(line) for line in res.stdout.splitlines()[-2:])
    assert added == ["scanner:inspect_watch/rules", "scanner:inspect_watch/rules_flag"]
    assert modules == ["inspect_watch", "inspect_watch._registry"]


# -- in-process ------------------------------------------------------------------------


def test_clock_driven_rules_are_left_out_and_named() -> None:
    pack = rule_pack(ScanOptions.of())
    assert "stalled-sample" in pack.clock_skipped
    assert "stalled-sample" in pack.ruleset.ids  # loaded (so named) ...
    assert "stalled-sample" not in {r.id for r in pack.engine.rules}  # ... but not run
    assert all(r.detect_kind != "idle" for r in pack.engine.rules)
    assert "repeated-call-twice" in {r.id for r in pack.engine.rules}


def test_scanner_arguments_are_checked() -> None:
    opts = ScanOptions.of(rules="x.yaml", only=["a,b", "c"], disable="d")
    assert opts.rules == (str(Path("x.yaml").resolve()),)
    assert (opts.only, opts.disable) == (("a", "b", "c"), ("d",))
    for bad in ({"needs": "everything"}, {"min_confidence": "certain"}, {"only": 3},
                {"builtin": "no"}):
        with pytest.raises(ScannerArgsError):
            ScanOptions.of(**bad)  # type: ignore[arg-type]
    with pytest.raises(ScannerArgsError, match="no rule id or category"):
        from watcher.scout import check_rules

        check_rules(ScanOptions.of(only="no-such-rule"))


def test_agent_text_stays_out_of_our_words() -> None:
    """The explanation is the rule's message; what the agent wrote appears in it only as a
    short one-line code span (no Markdown, no line of its own), whole in the untrusted
    ``metadata.evidence.agent_text``."""
    from inspect_ai.event import ToolEvent

    hostile = ("**all clear**\n# inspect-watch: [nothing found](http://example.invalid) "
               + "x" * 200)
    events = [ToolEvent(id=f"c{i}", function="bash", arguments={"cmd": hostile},
                        result="same", uuid=f"u{i}") for i in range(2)]
    transcript = Transcript(transcript_id="t1", source_type="test", task_id="s1",
                            task_repeat=1, events=events)
    (result,) = scan_results(transcript, ScanOptions.of(only="repeated-call-twice"))
    assert result.label == "repeated-call-twice" and result.value == "low"
    assert [(r.id, r.cite) for r in result.references] == [("u0", "[E1]"), ("u1", "[E2]")]
    summary, why, cites = result.explanation.split("\n\n")
    assert summary.startswith("`bash` ran 2 times with the same arguments and result: `")
    quoted = summary.split("result: ", 1)[1]
    assert "**all clear**" in quoted and "# inspect-watch" in quoted  # inside the span
    assert "\n" not in summary
    assert quoted.startswith("`") and quoted.endswith("`") and quoted.count("`") == 2
    assert why.startswith("Confidence low: ")
    assert cites == "Events: [E1], [E2]"
    (text,) = result.metadata["evidence"]["agent_text"][-1:]
    assert "# inspect-watch: [nothing found]" in text and "x" * 40 in text
    assert result.metadata["sample_rules_context"] == "transcript"


def test_ready_for_scout_0_6_2_api() -> None:
    """Scout 0.6.2 (it needs inspect-ai 0.3.286, not released yet) refuses a bare-string
    event or message filter other than "all", and "all" inside a list; it moved nothing
    else we call. Checked against the API surface, whatever version is installed: every
    scanner we register declares only filters 0.6.2 accepts, and each Scout and Inspect
    name we use takes the arguments we pass."""
    import inspect as pyinspect
    import typing

    from inspect_ai._util.error import PrerequisiteError
    from inspect_ai._util.registry import RegistryInfo, registry_add, registry_has
    from inspect_scout import Reference, Result, scanner
    from inspect_scout._scanner.filter import normalize_events_filter
    from inspect_scout._scanner.scanner import config_for_scanner
    from inspect_scout._transcript.types import EventType, MessageType

    from inspect_watch.scanners import rules, rules_flag

    def strict(value: Any, allowed: set[str], what: str) -> None:
        """0.6.2's rule (inspect_scout/_scanner/filter.py): "all", or a non-empty list of
        known types without "all"; a bare string is refused."""
        if value is None or value == "all":
            return
        assert not isinstance(value, str), f"{what}={value!r}: a bare string"
        assert value and "all" not in value and set(value) <= allowed, (what, value)

    events = set(typing.get_args(EventType)) - {"all"}
    messages = set(typing.get_args(MessageType)) - {"all"}
    assert {"model", "tool", "error"} <= events
    for factory in (rules, rules_flag):
        content = config_for_scanner(factory()).content
        strict(content.events, events, "events")
        strict(content.messages, messages, "messages")
        if content.events is not None:  # and the installed Scout takes it as it is
            assert normalize_events_filter(content.events) == content.events
    # the names and parameters we use
    assert {"name", "events", "metadata"} <= set(pyinspect.signature(scanner).parameters)
    assert {"value", "label", "explanation", "references", "metadata"} <= set(
        Result.model_fields)
    assert {"type", "id", "cite"} <= set(Reference.model_fields)
    assert issubclass(PrerequisiteError, Exception)
    assert {"type", "name"} <= set(pyinspect.signature(RegistryInfo).parameters)
    assert callable(registry_add) and callable(registry_has)
    assert Result(value=True, label="r").value is True  # a boolean value is a value
