"""``inspect-watch top`` over a live fleet: its CPU beyond the watch, and redraw latency.

    python benchmarks/bench_top.py [--samples 300] [--turns 10] [--tool-delay 6]
                                   [--repeat-every 5] [--poll 1] [--size 80x24]

One scripted eval (the fleet of benchmarks/bench_fleet.py: every sample at once, each
``turns`` tool calls of ``tool-delay`` seconds, every ``repeat-every``-th repeating a
call five times mid-run, which the repeat rule finds) is watched by two processes at
once, from the working tree's sources:

* ``inspect-watch watch --format jsonl -o FILE`` (the watch alone), and
* ``inspect-watch top`` in a pseudo-terminal of ``--size`` cells (80x24), which runs
  the same watch in-process with its screen; its output is read and thrown away, as
  a terminal would draw it.

Prints each one's CPU as % of one core over the same window (from ``--warmup``
seconds after both started, so neither's imports count, to the eval's exit; read
from ``/proc/PID/stat``, threads included), over each one's lifetime (``os.wait4``
rusage), and the difference: what the screen costs beyond the watch (the target: at
most 10 % of a core with 300 running samples). top's watch also keeps a row per
sample and each sample's last 40 events (for its drill-in and ``e`` key), so the
difference is all that ``top`` costs, not its drawing alone. And, from
``INSPECT_WATCH_TOP_TRACE`` (the screen writes, for each finding, when its sink
received it and when a redraw first put it in the tables), the redraw latency
(target: within a second of a new finding), and the latency from the finding's last
evidence event. top is quit (``q``) two seconds after the plain watch has ended (the
eval exited).
"""

from __future__ import annotations

import argparse
import fcntl
import os
import struct
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_fleet import reap, run_eval, tail  # noqa: E402
from common import banner, percentile, tmpdir, watch_cmd, write_task_file  # noqa: E402


def pty_for(cols: int, rows: int) -> tuple[int, int]:
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    return master, slave


def drain(fd: int, counted: list[int], stop: threading.Event) -> None:
    """Read what the screen draws (as a terminal would) so it never blocks on a full pty."""
    while not stop.is_set():
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            return
        if not chunk:
            return
        counted[0] += len(chunk)


def cpu_now(pid: int) -> float:
    """``pid``'s user+system CPU seconds so far (all its threads), or NaN once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def reap_within(proc: subprocess.Popen[bytes], seconds: float) -> tuple[int, float]:
    """:func:`reap`, but a process that has not exited after ``seconds`` is killed."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return proc.returncode, ru.ru_utime + ru.ru_stime
        time.sleep(0.05)
    proc.kill()
    return reap(proc)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=300)
    ap.add_argument("--turns", type=int, default=10)
    ap.add_argument("--tool-delay", type=float, default=6.0)
    ap.add_argument("--repeat-every", type=int, default=5)
    ap.add_argument("--poll", type=float, default=1.0)
    ap.add_argument("--jitter", type=float, default=0.5)
    ap.add_argument("--size", default="80x24")
    ap.add_argument("--warmup", type=float, default=5.0,
                    help="seconds after both start before the common CPU window opens")
    args = ap.parse_args()
    cols, rows = (int(x) for x in args.size.split("x"))
    banner("bench_top")
    work = tmpdir("bench-top-")
    task_file = write_task_file(work, samples=args.samples, turns=args.turns,
                                repeat_every=args.repeat_every, repeat_at=args.turns // 2,
                                jitter=args.jitter)
    print(f"{args.samples} samples at once, {args.turns} calls x {args.tool_delay}s each; "
          f"every {args.repeat_every}th sample repeats a call; poll {args.poll}s; "
          f"top in a {cols}x{rows} pseudo-terminal")
    proc = run_eval(work, task_file, args.samples, args.tool_delay, "top")
    disc = work / "data-top" / "inspect_ai" / "control" / f"{proc.pid}.json"
    while not disc.exists() and proc.poll() is None:
        time.sleep(0.05)
    env = {**os.environ, "XDG_DATA_HOME": str(work / "data-top")}
    out = work / "findings.jsonl"
    trace = work / "top-trace.txt"
    found: dict[str, tuple[float, dict[str, object]]] = {}
    stop = threading.Event()
    tailer = threading.Thread(target=tail, args=(out, found, stop), daemon=True)
    tailer.start()

    w0 = time.perf_counter()
    watch = subprocess.Popen(watch_cmd("watch", "--format", "jsonl", "-o", str(out), "--poll",
                                       str(args.poll)), env=env, stdout=subprocess.DEVNULL,
                             stderr=(work / "watch.err").open("wb"), stdin=subprocess.DEVNULL)
    master, slave = pty_for(cols, rows)

    def controlling_tty() -> None:
        os.setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    t0 = time.perf_counter()
    top = subprocess.Popen(watch_cmd("top", "--poll", str(args.poll)),
                           env={**env, "TERM": "xterm-256color",
                                "INSPECT_WATCH_TOP_TRACE": str(trace)},
                           stdin=slave, stdout=slave, stderr=slave, preexec_fn=controlling_tty)
    os.close(slave)
    drawn = [0]
    reader = threading.Thread(target=drain, args=(master, drawn, stop), daemon=True)
    reader.start()

    time.sleep(args.warmup)
    window = [(time.perf_counter(), cpu_now(watch.pid), cpu_now(top.pid))]
    code, eval_cpu = reap(proc)
    window.append((time.perf_counter(), cpu_now(watch.pid), cpu_now(top.pid)))
    wcode, watch_cpu = reap(watch)
    watch_wall = time.perf_counter() - w0
    time.sleep(2.0)  # the screen's last redraws
    os.write(master, b"q")
    tcode, top_cpu = reap_within(top, 60)
    top_wall = time.perf_counter() - t0
    stop.set()
    tailer.join(1)

    (a, wa, ta), (b, wb, tb) = window
    span = b - a
    watch_win, top_win = 100 * (wb - wa) / span, 100 * (tb - ta) / span
    print(f"eval: exit {code}, cpu {eval_cpu:.1f}s")
    print(f"same {span:.1f}s window (from {args.warmup:g}s after start to the eval's exit):")
    print(f"  watch alone: {watch_win:5.1f}% of one core")
    print(f"  top:         {top_win:5.1f}% of one core")
    print(f"  top beyond the watch: {top_win - watch_win:+.1f}% of one core "
          "(target: at most 10%)")
    watch_share = 100 * watch_cpu / watch_wall
    top_share = 100 * top_cpu / top_wall
    print("lifetimes (start-up and top's 2 s after the eval included):")
    print(f"  watch alone: exit {wcode}, wall {watch_wall:.1f}s, cpu {watch_cpu:.1f}s = "
          f"{watch_share:.1f}% of one core")
    print(f"  top:         exit {tcode}, wall {top_wall:.1f}s, cpu {top_cpu:.1f}s = "
          f"{top_share:.1f}% of one core; drew {drawn[0] / 1e3:.0f} KB to its terminal")

    lines = [ln.split() for ln in trace.read_text().splitlines()] if trace.exists() else []
    redraw = [float(d) - float(r) for _, r, d in lines]
    if redraw:
        print(f"redraw after a new finding reached the screen's sink: p50 "
              f"{percentile(redraw, 50):.2f}s  p95 {percentile(redraw, 95):.2f}s  "
              f"max {max(redraw):.2f}s  (n={len(redraw)}; target: within 1 s)")
    drawn_at = {fid: float(d) for fid, _, d in lines}
    from_event, plain = [], []
    for fid, (seen_at, rec) in found.items():
        ev = rec.get("evidence") or {}
        stamps = [t for t in ev.get("timestamps") or [] if isinstance(t, int | float)]  # type: ignore[union-attr]
        if stamps:
            plain.append(seen_at - max(stamps))
            if fid in drawn_at:
                from_event.append(drawn_at[fid] - max(stamps))
    for label, values in (("drawn in top", from_event), ("the plain watch's line", plain)):
        if values:
            print(f"{label + ',':24} from the finding's last evidence event: p50 "
                  f"{percentile(values, 50):.2f}s  p95 {percentile(values, 95):.2f}s  "
                  f"max {max(values):.2f}s  (n={len(values)})")
    print(f"findings: {len(found)} by the plain watch, {len(lines)} drawn by top")


if __name__ == "__main__":
    main()
