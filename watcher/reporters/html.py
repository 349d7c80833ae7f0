"""End-of-run report as one self-contained HTML page (inline CSS, no JS, no fetches).

Same content as the Markdown report plus a timeline of findings per sample
(CSS bars positioned by first_seen/last_seen). Every string that did not come
from this module is cleaned and HTML-escaped, and a Content-Security-Policy
meta tag forbids scripts and remote loads as a second line of defence, so the
page is safe to open even when the agent wrote ``<script>`` into its output.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from watcher.findings import Finding, Notice
from watcher.handoff import finding_handoff, view_command, view_dir_command
from watcher.reporters.base import by_confidence, find_outliers, task_cells, unknown_tasks
from watcher.reporters.formatting import (
    BADGES,
    detail_rows,
    fmt_clock,
    fmt_duration,
    fmt_number,
    fmt_span,
    fmt_time,
)
from watcher.reporters.markdown import MarkdownReporter
from watcher.sanitize import UNTRUSTED_LABEL, html_text, quote_agent_text
from watcher.summary import RunSummary, SampleSummary, fold_findings

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'none'"

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:2em auto;max-width:1100px;
 padding:0 1em;color:#1d1d1f;background:#fff}
h1{font-size:1.6em}h2{border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:1.6em}
table{border-collapse:collapse;width:100%}th,td{border:1px solid #ddd;padding:.3em .5em;
 text-align:left;vertical-align:top}th{background:#f5f5f7}
code,pre{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12.5px}
pre{white-space:pre-wrap;overflow-wrap:anywhere;background:#f5f5f7;padding:.6em;margin:.4em 0}
pre.agent{background:#fff8e6;border-left:4px solid #d99a00}
.note{background:#fff8e6;border:1px solid #e8c66a;padding:.6em}
.badge{display:inline-block;font-weight:700;padding:0 .45em;border-radius:3px;color:#fff}
.high{background:#c62828}.medium{background:#e0a800;color:#222}.low{background:#2a8fa8}
.finding{border:1px solid #ddd;border-radius:6px;padding:.2em 1em .6em;margin:1em 0}
.finding h4{margin:.6em 0 .3em}.meta{color:#555}
.tl{margin:.5em 0 1em}.tlrow{display:flex;align-items:center;margin:2px 0}
.tllabel{width:30%;font-size:12px;overflow:hidden;text-overflow:ellipsis;white-space:nowrap;
 padding-right:.5em}
.track{position:relative;flex:1;height:16px;background:#f0f0f2;border-radius:3px}
.bar{position:absolute;top:2px;height:12px;border-radius:2px;opacity:.85;min-width:3px}
.axis{display:flex;justify-content:space-between;font-size:11px;color:#666;margin-left:30%}
"""


def _h(s: object, max_len: int = 500) -> str:
    return html_text(s, max_len, one_line=True)


def _code(s: object, max_len: int = 500) -> str:
    return f"<code>{_h(s, max_len)}</code>"


def _badge(level: str) -> str:
    cls = level if level in BADGES else "low"
    return f'<span class="badge {cls}">{escape(BADGES.get(level, _h(level, 20).upper()))}</span>'


def _agent_pre(text: str, max_len: int = 4000) -> str:
    return f'<pre class="agent">{escape(quote_agent_text(text, max_len, one_line=False))}</pre>'


def _timeline(findings: Sequence[Finding], summary: RunSummary) -> str:
    if not findings:
        return "<p>No findings.</p>"
    t0 = min(f.first_seen for f in findings)
    t1 = max(max(f.last_seen, f.first_seen) for f in findings)
    if summary.started_at:
        t0 = min(t0, summary.started_at)
    if summary.ended_at:
        t1 = max(t1, summary.ended_at)
    span = max(t1 - t0, 1e-9)
    rows: dict[tuple[str, str, str, int, int], list[Finding]] = {}
    for f in findings:
        s = f.sample
        rows.setdefault((s.task, s.model, s.sample_id, s.epoch, s.attempt), []).append(f)
    out = ['<div class="tl">']
    for (task, model, sid, epoch, attempt), fs in rows.items():
        label = f"{task} · sample {sid} · epoch {epoch} · attempt {attempt}"
        out.append(f'<div class="tlrow"><div class="tllabel" title="{_h(label + " · " + model)}">'
                   f'{_h(label, 200)}</div><div class="track">')
        for f in fs:
            left = 100.0 * (f.first_seen - t0) / span
            width = 100.0 * (max(f.last_seen, f.first_seen) - f.first_seen) / span
            tip = f"{BADGES.get(f.confidence, '?')} {f.title} — {fmt_span(f)}"
            cls = f.confidence if f.confidence in BADGES else "low"
            out.append(f'<div class="bar {cls}" style="left:{left:.2f}%;width:{width:.2f}%" '
                       f'title="{_h(tip)}"></div>')
        out.append("</div></div>")
    out.append(f'<div class="axis"><span>{escape(fmt_time(t0))}</span>'
               f'<span>{escape(fmt_duration(t1 - t0))}</span>'
               f'<span>{escape(fmt_time(t1))}</span></div></div>')
    return "\n".join(out)


def _finding_html(f: Finding) -> str:
    s = f.sample
    parts = [
        '<div class="finding">',
        f"<h4>{_badge(f.confidence)} {_h(f.title, 200)} · {_h(s.task, 100)} · sample "
        f"{_code(s.sample_id, 100)} · epoch {s.epoch} · attempt {s.attempt}</h4>",
        f'<div class="meta">rule {_code(f.rule, 100)} · category {_h(f.category, 60)} · '
        f"severity {_h(f.severity, 20)} · status {_h(f.status, 20)} · score {f.score:.2f} · "
        f"model {_h(s.model, 100)}</div>",
        "<ul>",
        f"<li>seen: {_h(fmt_span(f))}</li>",
    ]
    parts += [f"<li>{_h(label, 40)}: {_h(text, limit)}</li>" for label, text, limit
              in detail_rows(f)]
    ev = f.evidence
    if s.log_location:
        parts.append(f"<li>log: {_code(s.log_location)} — open with "
                     f"{_code(view_command(s.log_location), 600)}</li>")
    parts.append("</ul>")
    for i, ex in enumerate(ev.excerpts, 1):
        parts.append(f"<div>Excerpt {i} of {len(ev.excerpts)}:</div>{_agent_pre(ex)}")
    handoff = finding_handoff(f)
    if handoff:
        parts.append("<div>What the person running the eval can do:</div>"
                     f"<pre>{html_text(handoff, 4000, one_line=False)}</pre>")
    parts.append("</div>")
    return "\n".join(parts)


def _sample_error_html(s: SampleSummary) -> str:
    head = (f"{_h(s.task, 100)} ({_h(s.model, 100)}) sample {_code(s.sample_id, 100)} "
            f"epoch {s.epoch}: <b>{_h(s.status, 20)}</b>")
    if s.retries:
        head += f", retried {s.retries}×" + (" then succeeded" if s.status == "success" else "")
    items = [f"<li>attempt {i} error:{_agent_pre(e, 1000)}</li>"
             for i, e in enumerate(s.retry_errors, 1)]
    if s.error:
        items.append(f"<li>error:{_agent_pre(s.error, 1000)}</li>")
    if s.log_location:
        items.append(f"<li>log: {_code(s.log_location)}</li>")
    return f"<li>{head}<ul>{''.join(items)}</ul></li>"


def _notice_html(n: Notice) -> str:
    when = f"{escape(fmt_clock(n.at))} " if n.at else ""
    text = f"<li>{when}<b>{_h(n.kind, 40)}</b>: {_h(n.message)}"
    if n.sample is not None:
        text += (f" (task {_h(n.sample.task, 100)}, sample {_code(n.sample.sample_id, 100)}, "
                 f"epoch {n.sample.epoch})")
    return text + "</li>"


def _none_known(summary: RunSummary, none: str) -> str:
    """``none`` when every task's samples were read; else what could not be known."""
    unknown = unknown_tasks(summary)
    if not unknown:
        return escape(none)
    if not summary.samples:
        return "Not known: no sample data was read (see Tasks)."
    names = ", ".join(_h(t.task, 100) for t, _ in unknown)
    return f"None among the {len(summary.samples)} samples read; not known for {names}."


def render_html(summary: RunSummary, *, title: str = "inspect-watch report") -> str:
    """The whole report as one HTML document (UTF-8, no external resources)."""
    findings = fold_findings(summary.findings)
    body: list[str] = [f"<h1>{_h(title)}</h1>"]
    if summary.started_at or summary.ended_at:
        body.append(f"<p>Watched {escape(fmt_time(summary.started_at))} → "
                    f"{escape(fmt_time(summary.ended_at))}.</p>")
    body.append(f'<p class="note">Text labelled <i>{escape(UNTRUSTED_LABEL)}</i> was written by '
                "the evaluated agent or its dataset. It is shown cleaned and quoted; it is not "
                "the watcher's assessment, and instructions inside it are not addressed to "
                "you.</p>")

    body.append("<h2>Tasks</h2>")
    if summary.tasks:
        body.append("<table><tr><th>Task</th><th>Model</th><th>Samples</th><th>Succeeded</th>"
                    "<th>Errored</th><th>Retried</th><th>Scores</th><th>Log</th></tr>")
        for t in summary.tasks:
            total, success, error, retried = task_cells(t, summary.samples)
            scores = ", ".join(f"{_h(k, 60)} {escape(fmt_number(v))}"
                               for k, v in t.scores.items()) or ("?" if t.unknown else "—")
            log = _code(t.log_location) if t.log_location else "—"
            body.append(f"<tr><td>{_h(t.task, 100)}</td><td>{_h(t.model, 100)}</td>"
                        f"<td>{escape(total)}</td><td>{success}</td><td>{error}</td>"
                        f"<td>{retried}</td><td>{scores}</td><td>{log}</td></tr>")
        body.append("</table>")
        unknown = unknown_tasks(summary)
        if unknown:
            body.append("<p>Not known (<code>?</code>):</p><ul>" + "".join(
                f"<li>{_h(t.task, 100)} ({_h(t.model, 100)}): {_h(why, 600)}</li>"
                for t, why in unknown) + "</ul>")
    else:
        body.append("<p>No tasks known.</p>")

    body.append("<h2>Outliers</h2>")
    outliers = find_outliers(summary.samples)
    if outliers:
        body.append("<ul>")
        for o in outliers:
            s = o.sample
            if o.metric == "total_time":
                what, val, med = "time", fmt_duration(o.value), fmt_duration(o.median)
            else:
                what, val, med = "tokens", f"{int(o.value):,}", f"{int(o.median):,}"
            body.append(f"<li>{_h(s.task, 100)} ({_h(s.model, 100)}) sample "
                        f"{_code(s.sample_id, 100)} epoch {s.epoch}: {what} {escape(val)}, "
                        f"{o.ratio:.1f}× the task median ({escape(med)})</li>")
        body.append("</ul>")
    else:
        none = "None: no sample was far slower or heavier than the rest of its task."
        body.append(f"<p>{_none_known(summary, none)}</p>")

    body.append("<h2>Errored samples</h2>")
    errored = [s for s in summary.samples if s.status == "error" or s.retries or s.retry_errors]
    body.append("<ul>" + "".join(_sample_error_html(s) for s in errored) + "</ul>"
                if errored else f"<p>{_none_known(summary, 'None.')}</p>")

    body.append(f"<h2>Timeline ({len(findings)} findings)</h2>")
    body.append(_timeline(findings, summary))

    body.append(f"<h2>Findings ({len(findings)})</h2>")
    for level, group in by_confidence(findings).items():
        body.append(f"<h3>{_badge(level)} {escape(level.capitalize())} confidence "
                    f"({len(group)})</h3>")
        body.extend(_finding_html(f) for f in group)
        if not group:
            body.append("<p>None.</p>")

    body.append(f"<h2>Notices ({len(summary.notices)})</h2>")
    body.append("<ul>" + "".join(_notice_html(n) for n in summary.notices) + "</ul>"
                if summary.notices else "<p>None.</p>")

    body.append("<h2>Logs</h2><ul>")
    for d in summary.log_dirs:
        body.append(f"<li>{_code(d)}: open with {_code(view_dir_command(d), 600)}</li>")
    body.extend(f"<li>{_code(p)}</li>" for p in summary.log_files)
    body.append("</ul>")

    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">\n'
        '<meta name="viewport" content="width=device-width,initial-scale=1">\n'
        f"<title>{_h(title)}</title>\n<style>{CSS}</style></head>\n<body>\n"
        + "\n".join(body)
        + "\n</body></html>\n"
    )


class HtmlReporter(MarkdownReporter):
    """Like :class:`MarkdownReporter` (collect live, write at ``stop``), rendering HTML."""

    name = "html"
    render = staticmethod(render_html)

