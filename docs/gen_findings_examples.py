"""Regenerate the example lines in docs/findings.md from a real watch of the demo eval.

    python docs/gen_findings_examples.py

Runs the bundled demo eval (``examples/demo_eval.py``, scripted model: no key, no network)
with a private data directory, watches it live with ``inspect-watch watch --format jsonl``,
and writes chosen lines of that output between the ``<!-- generated: NAME -->`` and
``<!-- end generated -->`` markers of docs/findings.md. Only two things are changed, and
the document says so: the temporary directory becomes ``/home/me/evals``, and the finding's
long ``handoff`` string is cut after its first line. tests/test_docs.py checks that the
examples have the fields, rule ids, categories and notice kinds the code produces now.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "findings.md"
SHOWN_DIR = "/home/me/evals"
BLOCK = re.compile(r"(<!-- generated: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- end generated -->)",
                   re.S)


def watch_demo(tmp: Path) -> list[dict[str, Any]]:
    """The JSONL records of a live watch of the demo eval, start to finish."""
    data = tmp / "data"
    env = {**os.environ, "XDG_DATA_HOME": str(data), "INSPECT_LOG_LEVEL": "warning"}
    eval_cmd = [sys.executable, "-m", "inspect_ai._cli.main", "eval",
                f"{REPO / 'examples' / 'demo_eval.py'}@demo", "--log-dir", str(tmp / "logs"),
                "--display", "none"]
    ev = subprocess.Popen(eval_cmd, env=env, cwd=tmp, stdout=subprocess.DEVNULL,
                          stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        discovery = data / "inspect_ai" / "control" / f"{ev.pid}.json"
        deadline = time.time() + 120
        while not discovery.exists():
            if ev.poll() is not None or time.time() > deadline:
                raise SystemExit("the demo eval did not start")
            time.sleep(0.1)
        out = tmp / "findings.jsonl"
        subprocess.run([sys.executable, "-m", "watcher", "watch", "--format", "jsonl",
                        "--output", str(out), "--poll", "0.5"], env=env, check=True,
                       timeout=300, stdin=subprocess.DEVNULL)
        ev.wait(timeout=120)
    finally:
        if ev.poll() is None:
            ev.kill()
            ev.wait()
    return [json.loads(line) for line in out.read_text().splitlines()]


def _shown(record: dict[str, Any], tmp: Path) -> dict[str, Any]:
    text = json.dumps(record).replace(str(tmp), SHOWN_DIR)
    return dict(json.loads(text))


def wrapped(record: dict[str, Any]) -> str:
    """One JSON object, one top-level field per line (still valid JSON)."""
    parts = [f"{json.dumps(k)}:{json.dumps(v, ensure_ascii=True, separators=(',', ':'))}"
             for k, v in record.items()]
    return "{" + ",\n ".join(parts) + "}"


def blocks(records: list[dict[str, Any]], tmp: Path) -> dict[str, str]:
    findings = [r for r in records if r["kind"] == "finding"]
    opened = next(r for r in findings if r["rule"] == "repeated-tool-call"
                  and r["status"] == "open")
    escalated = next(r for r in findings if r["status"] == "escalated")
    notice = next(r for r in records if r.get("notice") == "process_exited")
    shown = _shown(opened, tmp)
    first, _, rest = shown["handoff"].partition("\n")
    shown["handoff"] = first + ("\n…" if rest else "")
    brief = [{k: r[k] for k in ("kind", "id", "rule", "confidence", "status", "count",
                                "episode")} for r in findings if r["id"] == escalated["id"]]
    return {
        "finding-example": "```json\n" + wrapped(shown) + "\n```\n",
        "snapshots-example": "```json\n" + "\n".join(
            json.dumps(b, separators=(",", ":")) for b in brief) + "\n```\n",
        "notice-example": "```json\n" + json.dumps(_shown(notice, tmp), ensure_ascii=True,
                                                   separators=(",", ":")) + "\n```\n",
    }


def write(doc: str, generated: dict[str, str]) -> str:
    missing = set(generated) - {m["name"] for m in BLOCK.finditer(doc)}
    if missing:
        raise SystemExit(f"{DOC}: no markers for {sorted(missing)}")
    return BLOCK.sub(lambda m: m[1] + generated.get(m["name"], m["body"]) + m[4], doc)


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="iw-docs-", dir="/tmp") as tmp:
        records = watch_demo(Path(tmp))
        generated = blocks(records, Path(tmp))
    DOC.write_text(write(DOC.read_text(), generated))
    print(f"wrote {len(generated)} example blocks to {DOC}")


if __name__ == "__main__":
    main()
