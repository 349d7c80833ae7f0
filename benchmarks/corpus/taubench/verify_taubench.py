r"""Check a replay_taubench.py log against the recorded trajectories, turn by turn.

usage: python verify_taubench.py LOG.eval [TRAJECTORIES_JSON]
Per sample (id "task<task_id>-<k>", k-th trajectory of that task id in file order), the
log's messages must be the recorded `traj` one for one: the same roles in the same order;
the system and user messages with the recorded text; each assistant message with the
recorded text ("" for a null content) and the recorded tool calls (same function names,
same arguments once parsed as JSON); each tool message answering the call before it (its
tool_call_id and function) with the recorded output as its text and no error; nothing
more. The score is the recorded reward; metadata task_id / reward / instruction / trial
are the recorded ones; the sample has no error and hit no limit. Exit status 1 on any
mismatch.
"""

import json
import sys
from pathlib import Path

from inspect_ai.log import read_eval_log


def load(path: Path) -> dict[str, dict]:
    out, seen = {}, {}
    for t in json.loads(path.read_text()):
        k = seen.get(t["task_id"], 0)
        seen[t["task_id"]] = k + 1
        out[f"task{t['task_id']}-{k}"] = t
    return out


def check(s, t: dict, counts: dict) -> list[str]:
    rec, got, bad = t["traj"], s.messages, []
    if len(rec) != len(got):
        bad.append(f"{len(got)} messages, recorded {len(rec)}")
    pending: list = []
    for i, (r, m) in enumerate(zip(rec, got, strict=False)):
        if r["role"] != m.role:
            return bad + [f"message {i}: {m.role}, recorded {r['role']}"]
        if r["role"] in ("system", "user"):
            counts[r["role"]] += 1
            if m.text != r["content"]:
                bad.append(f"message {i}: {r['role']} text differs")
        elif r["role"] == "assistant":
            counts["assistant"] += 1
            if m.text != (r["content"] or ""):
                bad.append(f"message {i}: assistant text differs")
            rc = r.get("tool_calls") or []
            mc = m.tool_calls or []
            if not rc:
                counts["text_turns"] += 1
            if [(c["name"], json.loads(c["arguments"])) for c in rc] != \
                    [(c.function, c.arguments) for c in mc]:
                bad.append(f"message {i}: tool calls differ")
            counts["calls"] += len(rc)
            pending = list(mc)
        else:  # tool
            c = pending.pop(0) if pending else None
            if c is None or m.tool_call_id != c.id or m.function != r["name"]:
                bad.append(f"message {i}: tool message answers another call")
            if m.error is not None:
                bad.append(f"message {i}: tool error {m.error.message[:80]}")
            if m.text != r["content"]:
                bad.append(f"message {i}: tool output differs")
            if r["content"].startswith("Error"):
                counts["error_outputs"] += 1
    md = s.metadata
    for key in ("task_id", "reward", "instruction", "trial"):
        if md.get(key) != t.get(key):
            bad.append(f"metadata {key}")
    score = list(s.scores.values())[0].value if s.scores else None
    if score != t["reward"]:
        bad.append(f"score {score}, recorded {t['reward']}")
    if s.error is not None:
        bad.append(f"sample error {s.error.message[:80]}")
    if s.limit is not None:
        bad.append(f"sample limit {s.limit}")
    return bad


def main():
    log = read_eval_log(sys.argv[1])
    src = Path(sys.argv[2]) if len(sys.argv) > 2 else Path(__file__).parent / "trajectories.json"
    recorded = load(src)
    print("status", log.status, "task", log.eval.task, "model", log.eval.model,
          "samples", len(log.samples))
    ids = [str(s.id) for s in log.samples]
    problems = 0
    if len(set(ids)) != len(ids):
        print("duplicate sample ids")
        problems += 1
    if set(ids) != set(recorded):
        print(f"ids differ: {len(set(recorded) - set(ids))} missing, "
              f"{len(set(ids) - set(recorded))} extra")
        problems += 1
    counts = dict.fromkeys(["system", "user", "assistant", "text_turns", "calls",
                            "error_outputs"], 0)
    for s in log.samples:
        if str(s.id) not in recorded:
            continue
        bad = check(s, recorded[str(s.id)], counts)
        if bad:
            problems += 1
            print(f"{s.id}: MISMATCH {'; '.join(bad[:5])}")
    print(f"checked {len(log.samples)} samples: {counts['assistant']} assistant turns "
          f"({counts['text_turns']} text-only), {counts['calls']} tool calls "
          f"({counts['error_outputs']} outputs starting 'Error'), {counts['user']} user "
          f"messages, {counts['system']} system messages; problems: {problems}")
    sys.exit(1 if problems or log.status != "success" else 0)


if __name__ == "__main__":
    main()
