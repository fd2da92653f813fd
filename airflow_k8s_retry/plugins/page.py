"""The failures page as HTML: a stacked bar chart (inline SVG), the worst tasks, every try.

Server-rendered and self-contained (no scripts, no external assets), so it works inside the
Airflow UI's plugin frame, behind proxies and in locked-down browsers alike.
"""

from __future__ import annotations

from datetime import datetime
from html import escape
from urllib.parse import urlencode

from airflow_k8s_retry.plugins.failures import RANGES, Summary

#: Colour-blind-safe palette (Okabe and Ito), then greys.
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000"]
OTHER = "#999999"
CHART_W, CHART_H, PAD_L, PAD_B, PAD_T = 860, 220, 40, 36, 10

STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:16px;color:#1a202c;}
h1{font-size:20px;margin:0 0 4px} h2{font-size:16px;margin:22px 0 8px}
.muted{color:#5a6473;font-size:13px} form{margin:10px 0 4px;display:flex;gap:10px;align-items:center}
select,button{font-size:14px;padding:3px 6px}
table{border-collapse:collapse;width:100%;font-size:13px} th,td{border-bottom:1px solid #e2e8f0;
padding:5px 6px;text-align:left;vertical-align:top} th{background:#f7fafc}
code{font-size:12px} .hint{color:#22543d} .legend span{display:inline-block;margin-right:14px;font-size:13px}
.legend i{display:inline-block;width:11px;height:11px;margin-right:5px;vertical-align:-1px}
.empty{padding:14px;background:#f7fafc;border:1px dashed #cbd5e0}
"""


def _colours(reasons: list[str]) -> dict[str, str]:
    return {r: PALETTE[i] if i < len(PALETTE) else OTHER for i, r in enumerate(reasons)}


def _label(at: datetime, hours: int) -> str:
    return at.strftime("%H:%M" if hours <= 24 else "%m-%d %H:%M" if hours <= 168 else "%m-%d")


def chart(summary: Summary, hours: int) -> str:
    """Failures per bucket, stacked by reason code, as one SVG element."""
    reasons = list(summary.series)
    colours = _colours(reasons)
    n = max(1, len(summary.buckets))
    totals = [sum(summary.series[r][i] for r in reasons) for i in range(len(summary.buckets))]
    peak = max([1, *totals])
    plot_w, plot_h = CHART_W - PAD_L - 10, CHART_H - PAD_B - PAD_T
    slot = plot_w / n
    bar = max(1.0, slot * 0.8)
    parts = [
        f'<svg id="chart" role="img" aria-label="failures by reason over time" width="{CHART_W}" '
        f'height="{CHART_H}" viewBox="0 0 {CHART_W} {CHART_H}" xmlns="http://www.w3.org/2000/svg">',
        f'<line x1="{PAD_L}" y1="{PAD_T + plot_h}" x2="{CHART_W - 10}" y2="{PAD_T + plot_h}" '
        'stroke="#718096"/>',
        f'<text x="{PAD_L - 6}" y="{PAD_T + 10}" text-anchor="end" font-size="11">{peak}</text>',
        f'<text x="{PAD_L - 6}" y="{PAD_T + plot_h}" text-anchor="end" font-size="11">0</text>',
    ]
    for i, at in enumerate(summary.buckets):
        x = PAD_L + i * slot + (slot - bar) / 2
        y = float(PAD_T + plot_h)
        for reason in reasons:
            count = summary.series[reason][i]
            if not count:
                continue
            h = plot_h * count / peak
            y -= h
            parts.append(
                f'<rect class="bar" data-reason="{escape(reason)}" data-count="{count}" x="{x:.1f}" '
                f'y="{y:.1f}" width="{bar:.1f}" height="{h:.1f}" fill="{colours[reason]}">'
                f"<title>{escape(reason)}: {count} at {at:%Y-%m-%d %H:%M}</title></rect>"
            )
    step = max(1, n // 8)
    for i in range(0, len(summary.buckets), step):
        x = PAD_L + i * slot + slot / 2
        parts.append(
            f'<text x="{x:.1f}" y="{CHART_H - PAD_B + 16}" text-anchor="middle" font-size="11">'
            f"{escape(_label(summary.buckets[i], hours))}</text>"
        )
    parts.append("</svg>")
    legend = "".join(
        f'<span><i style="background:{colours[r]}"></i>{escape(r)} ({sum(summary.series[r])})</span>'
        for r in reasons
    )
    return "".join(parts) + f'<div class="legend">{legend}</div>'


def _filters(dag_ids: list[str], dag_id: str | None, hours: int) -> str:
    dags = ['<option value="">all DAGs</option>'] + [
        f'<option value="{escape(d)}"{" selected" if d == dag_id else ""}>{escape(d)}</option>'
        for d in dag_ids
    ]
    spans = {1: "last hour", 6: "last 6 hours", 24: "last 24 hours", 168: "last 7 days", 720: "last 30 days"}
    ranges = [f'<option value="{h}"{" selected" if h == hours else ""}>{spans[h]}</option>' for h in RANGES]
    return (
        '<form method="get" action="">'
        f'<label>DAG <select name="dag_id" id="dag_id">{"".join(dags)}</select></label>'
        f'<label>Time range <select name="hours" id="hours">{"".join(ranges)}</select></label>'
        '<button type="submit">Show</button></form>'
    )


def render(summary: Summary, *, dag_ids: list[str], dag_id: str | None, hours: int, base: str = "") -> str:
    """The whole page. ``base`` is the URL of the Airflow UI, for links to task instances."""
    rows = []
    for r in summary.records:
        where = f"{r.namespace}/{r.pod_name}" if r.pod_name and r.namespace else (r.pod_name or "-")
        query = urlencode({"try_number": r.try_number} if r.try_number else {})
        link = (
            f"{base}/dags/{escape(r.dag_id)}/runs/{escape(r.run_id)}/tasks/{escape(r.task_id)}"
            + (f"/mapped/{r.map_index}" if r.map_index >= 0 else "")
            + (f"?{query}" if query else "")
        )
        hint = f'<div class="hint">fix: {escape(r.hint)}</div>' if r.hint else ""
        rows.append(
            '<tr class="failure">'
            f"<td>{r.at:%Y-%m-%d %H:%M:%S}</td>"
            f'<td><a href="{link}" target="_top">{escape(r.task)}</a>'
            f'<div class="muted">{escape(r.run_id)}</div></td>'
            f"<td>{r.try_number if r.try_number is not None else '-'}</td>"
            f"<td><code>{escape(where)}</code></td>"
            f'<td>{escape(r.outcome)}</td><td class="reason"><code>{escape(r.reason)}</code></td>'
            f'<td class="message">{escape(r.message)}{hint}</td>'
            "</tr>"
        )
    tops = [
        '<tr class="top-task">'
        f"<td>{escape(t.task)}</td><td>{t.failures}</td>"
        f"<td>{escape(', '.join(f'{k} ({v})' for k, v in t.reasons.items()))}</td>"
        f"<td>{t.last:%Y-%m-%d %H:%M}</td></tr>"
        for t in summary.top_tasks
    ]
    scope = f"DAG {escape(dag_id)}" if dag_id else "all DAGs"
    empty = '<div class="empty">No verdicts in this range.</div>'
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        "<title>Kubernetes pod failures</title>"
        f"<style>{STYLE}</style></head><body>"
        "<h1>Kubernetes pod failures</h1>"
        f'<div class="muted">Verdicts of RetryingPodOperator and PodCompletionSensor tries, {scope}, '
        f"{summary.since:%Y-%m-%d %H:%M} to {summary.until:%Y-%m-%d %H:%M} UTC. "
        "Every try is listed: the latest from its verdict XCom, "
        "earlier ones from Airflow's try history.</div>"
        + _filters(dag_ids, dag_id, hours)
        + f'<h2>Failures by reason over time (<span id="total">{summary.failures}</span>)</h2>'
        + (chart(summary, hours) if summary.failures else empty)
        + "<h2>Tasks failing most</h2>"
        + (
            '<table id="top-tasks"><tr><th>task</th><th>failures</th><th>reasons</th><th>last</th></tr>'
            + "".join(tops)
            + "</table>"
            if tops
            else empty
        )
        + "<h2>Tries</h2>"
        + (
            '<table id="tries"><tr><th>when (UTC)</th><th>task / run</th><th>try</th><th>pod</th>'
            "<th>outcome</th><th>reason</th><th>message and fix</th></tr>" + "".join(rows) + "</table>"
            if rows
            else empty
        )
        + "</body></html>"
    )
