"""Rebuild tau-bench trajectories from the transcription in raw/ (see README.md).

raw/system_prompt.jsonstr holds the airline policy (the recorded system message, as the
body of a JSON string). raw/tx_*.txt hold the trajectories in file order, one record a line:
  #T <task_id> <reward>       a trajectory starts           #E <trial>   it ends
  #I <instruction>            info.task.instruction (JSON string body)
  #S                          the system message is the policy above
  #U <text> / #A <text>       user / assistant message content (JSON string body)
  #C <name> <arguments>       a tool call of the assistant message (arguments verbatim);
                              an #A line right before it is that message's content
  #R <content>                the tool message for the pending call (content verbatim)
  #RL <label> <content>       same, and remember the content under <label>
  #RREF <label>               a tool message whose content equals the one remembered
Lines starting with "## " are comments (which source offsets a file covers).
Writes trajectories.json: [{task_id, reward, trial, instruction, traj: [...]}].
"""
import json
import sys
from pathlib import Path

HERE = Path(__file__).parent
RAW = HERE / "raw"


def jstr(body: str) -> str:
    return json.loads('"' + body + '"')


def parse() -> list[dict]:
    system = jstr(RAW.joinpath("system_prompt.jsonstr").read_text().rstrip("\n"))
    out, cur, labels, pending = [], None, {}, []
    for f in sorted(RAW.glob("tx_*.txt")):
        for n, line in enumerate(f.read_text().split("\n"), 1):
            if not line or line.startswith("## "):
                continue
            tag, _, rest = line.partition(" ")
            where = f"{f.name}:{n}"
            if tag == "#T":
                assert cur is None, where
                tid, rew = rest.split()
                cur = {"task_id": int(tid), "reward": float(rew), "instruction": None, "traj": []}
                continue
            assert cur is not None, where
            msgs = cur["traj"]
            if tag == "#I":
                cur["instruction"] = jstr(rest)
            elif tag == "#S":
                msgs.append({"role": "system", "content": system})
            elif tag == "#U":
                assert not pending, where
                msgs.append({"role": "user", "content": jstr(rest)})
            elif tag == "#A":
                assert not pending, where
                msgs.append({"role": "assistant", "content": jstr(rest)})
            elif tag == "#C":
                name, _, args = rest.partition(" ")
                json.loads(args)  # must be valid JSON
                last = msgs[-1]
                if last["role"] == "assistant" and last.get("_open"):
                    last["tool_calls"].append({"name": name, "arguments": args})
                elif last["role"] == "assistant" and "tool_calls" not in last:
                    last["tool_calls"] = [{"name": name, "arguments": args}]
                    last["_open"] = True
                else:
                    msgs.append({"role": "assistant", "content": None,
                                 "tool_calls": [{"name": name, "arguments": args}], "_open": True})
                pending.append(name)
            elif tag in ("#R", "#RL", "#RREF"):
                assert pending, where
                if tag == "#R":
                    content = rest
                elif tag == "#RL":
                    label, _, content = rest.partition(" ")
                    labels[label] = content
                else:
                    content = labels[rest]
                name = pending.pop(0)
                for m in msgs:
                    m.pop("_open", None)
                msgs.append({"role": "tool", "name": name, "content": content})
            elif tag == "#E":
                assert not pending, where
                cur["trial"] = int(rest)
                out.append(cur)
                cur = None
            else:
                raise ValueError(f"{where}: unknown tag {tag}")
    if cur is not None:
        print(f"dropping incomplete trajectory task {cur['task_id']}", file=sys.stderr)
    return out


if __name__ == "__main__":
    trajs = parse()
    HERE.joinpath("trajectories.json").write_text(json.dumps(trajs, indent=1, ensure_ascii=False))
    ncalls = sum(len(m.get("tool_calls") or []) for t in trajs for m in t["traj"])
    ids = [t["task_id"] for t in trajs]
    print(f"{len(trajs)} trajectories, task ids {ids}, {ncalls} tool calls")
