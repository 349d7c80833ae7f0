"""Print a real log's samples as compact, readable transcripts, for labelling by hand.

Independent of the watcher (it reads the ``.eval`` zip itself), so labels made from it
are not shaped by what the rules look at. Each step shows what the agent did and what
answered it: the assistant's text, each tool call whole (up to ``--args`` characters),
each result's length, a short digest (``#1a2b3c``: equal digests mean byte-identical
results) and its head and tail, and the message that answered a text-only turn
(the harness's continue message, or a user's reply).

    python benchmarks/labels/view.py LOG.eval                 # every sample
    python benchmarks/labels/view.py LOG.eval --ids a,b,c     # some
    python benchmarks/labels/view.py LOG.eval --list          # ids only
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
import zipfile
from typing import Any

import zipfile_zstd  # noqa: F401  (registers zstd with zipfile)

_REF = re.compile(r"attachment://([0-9a-f]{32})")
_BLOCK = re.compile(r"```bash\s*\n.*?\n```", re.S)


def _resolve(obj: Any, att: dict[str, str]) -> Any:
    if isinstance(obj, str):
        if "attachment://" in obj:
            return _REF.sub(lambda m: att.get(m.group(1), m.group(0)), obj)
        return obj
    if isinstance(obj, dict):
        return {k: _resolve(v, att) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_resolve(v, att) for v in obj]
    return obj


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for part in content:
            if isinstance(part, dict):
                if part.get("type") == "text":
                    out.append(str(part.get("text", "")))
                elif part.get("type") == "reasoning":
                    out.append("[reasoning] " + str(part.get("reasoning", ""))[:400])
        return "\n".join(out)
    return "" if content is None else str(content)


def _digest(text: str) -> str:
    return "#" + hashlib.sha256(text.encode()).hexdigest()[:6]


def _clip(text: str, head: int, tail: int = 0) -> str:
    text = text.replace("\r", "")
    if len(text) <= head + tail + 20:
        return text
    return text[:head] + f"\n   [... {len(text) - head - tail} chars ...]\n" + (
        text[-tail:] if tail else "")


def _indent(text: str, pad: str = "   ") -> str:
    return "\n".join(pad + line for line in text.splitlines() or [""])


def _prompt(event: dict[str, Any], pool: list[Any]) -> dict[str, Any] | None:
    """The last input message of a model event (what the model answered)."""
    msgs = event.get("input") or []
    if msgs:
        return msgs[-1] if isinstance(msgs[-1], dict) else None
    refs = event.get("input_refs") or []
    if refs and pool:
        end = refs[-1][1]
        return pool[end - 1] if 0 < end <= len(pool) else None
    return None


def render(sample: dict[str, Any], args: argparse.Namespace) -> str:
    att = sample.get("attachments") or {}
    pool = _resolve((sample.get("events_data") or {}).get("messages") or [], att)
    events = [_resolve(e, att) for e in sample.get("events") or []]
    lines = [f"=== sample {sample.get('id')} epoch {sample.get('epoch')} ==="]
    first_user = next((m for m in sample.get("messages") or []
                       if isinstance(m, dict) and m.get("role") == "user"), None)
    if first_user:
        lines.append("TASK: " + _clip(_text(_resolve(first_user.get("content"), att)), 600))
    step = 0
    last_text_turn = False
    calls_seen: dict[str, int] = {}  # whole arguments -> the step that first made the call
    for e in events:
        kind = e.get("event")
        if kind == "model":
            prompt = _prompt(e, pool)
            if last_text_turn and prompt is not None and prompt.get("role") == "user":
                lines.append("   <answered by user message> "
                             + _clip(_text(prompt.get("content")), 300))
            out = e.get("output") or {}
            choices = out.get("choices") or [{}]
            msg = (choices[0] or {}).get("message") or {}
            calls = msg.get("tool_calls") or []
            step += 1
            text = _text(msg.get("content"))
            if calls and args.compact:  # the call itself is shown below
                text = _BLOCK.sub("```(the call below)```", text)
            err = e.get("error")
            tag = "TEXT-ONLY TURN" if not calls else "turn"
            if err:
                tag = "MODEL ERROR"
            lines.append(f"[{step}] {tag}: "
                         + _indent(_clip(text, args.text, args.text // 2)).lstrip())
            if err:
                lines.append("   error: " + _clip(str(err), 300))
            last_text_turn = not calls and not err
        elif kind == "tool":
            arguments = e.get("arguments")
            a = json.dumps(arguments, ensure_ascii=False) if not isinstance(arguments, str) \
                else arguments
            if isinstance(arguments, dict) and len(arguments) == 1:
                a = str(next(iter(arguments.values())))
            result = e.get("result")
            r = result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)
            err = e.get("error")
            same = calls_seen.setdefault(f"{e.get('function')}|{a}", step)
            again = f" (same call as [{same}])" if same != step else ""
            lines.append(f"   CALL {e.get('function')}{again}: "
                         + _indent(_clip(a, args.args)).lstrip())
            lines.append(f"   -> {len(r)} chars {_digest(r)}"
                         + (f" ERROR {err.get('type')}: {err.get('message')}"
                            if isinstance(err, dict) else "")
                         + "\n" + _indent(_clip(r, args.result, args.result // 2), "      "))
        elif kind in ("error", "sample_limit"):
            what = json.dumps(e.get("error") or e.get("message"))
            lines.append(f"   <{kind}> " + _clip(what, 300))
    scores = sample.get("scores") or {}
    lines.append("SCORES: " + json.dumps({k: (v or {}).get("value") for k, v in scores.items()}))
    return "\n".join(lines)


def sample_ids(names: list[str]) -> list[str]:
    return [n[len("samples/"):].rsplit("_epoch_", 1)[0] for n in names]


def selected(names: list[str], n: int) -> list[str]:
    """The first ``n`` sample ids in sha256 order: a stable, unbiased subset to label."""
    ids = sorted(set(sample_ids(names)), key=lambda i: hashlib.sha256(i.encode()).hexdigest())
    return ids[:n]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("log")
    ap.add_argument("--ids", help="comma-separated sample ids")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--select", type=int, metavar="N",
                    help="only the first N sample ids in sha256 order (the labelled set)")
    ap.add_argument("--compact", action="store_true",
                    help="drop a tool-calling turn's code block (the call shows it)")
    ap.add_argument("--text", type=int, default=700, help="characters of assistant text")
    ap.add_argument("--args", type=int, default=900, help="characters of tool arguments")
    ap.add_argument("--result", type=int, default=350, help="characters of result head")
    args = ap.parse_args()
    z = zipfile.ZipFile(args.log)
    names = sorted(n for n in z.namelist() if n.startswith("samples/"))
    wanted = set(args.ids.split(",")) if args.ids else None
    if args.select:
        wanted = set(selected(names, args.select))
    for name in names:
        sid = name[len("samples/"):].rsplit("_epoch_", 1)[0]
        if args.list:
            print(sid)
            continue
        if wanted is not None and sid not in wanted:
            continue
        print(render(json.loads(z.read(name)), args))
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
