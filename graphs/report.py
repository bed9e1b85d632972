"""A self-contained HTML page for one run: answer, costs, the method graph, a diagram of every
topology the planner chose, and the trace tree with each call's observation and completion.
Inline CSS and SVG only — no scripts, no network — so it opens anywhere, offline."""

from __future__ import annotations

import json
from html import escape
from pathlib import Path

from graphs.compiler import compile_topology
from graphs.drawing import svg
from graphs.run import RunResult
from graphs.topology import Topology, parse_topology

_STYLE = """
body{font-family:system-ui,sans-serif;margin:2rem auto;max-width:1100px;color:#222}
h1{font-size:1.3rem} h2{font-size:1.1rem;margin-top:2rem;border-bottom:1px solid #ddd}
.answer{font-size:1.2rem;background:#f2f0ff;padding:.6rem 1rem;border-radius:6px}
table{border-collapse:collapse} td,th{border:1px solid #ddd;padding:.25rem .6rem;text-align:left}
.diagrams{display:flex;flex-wrap:wrap;gap:1.5rem;align-items:flex-start}
.bad{color:#b00020} .ok{color:#1b7f3b} details{margin:.2rem 0 .2rem 1rem}
pre{white-space:pre-wrap;background:#f7f7f7;padding:.5rem;font-size:.8rem}
"""


def topology_diagrams(topologies: list[str]) -> list[str]:
    drawn, seen = [], set()
    for text in topologies:
        topology = parse_topology(text)
        if isinstance(topology, Topology) and str(topology) not in seen:
            seen.add(str(topology))
            drawn.append(svg(compile_topology(topology), title=str(topology)))
    return drawn


def render_report(result: RunResult, graph=None, graph_name: str = "") -> str:
    costs = "".join(f"<tr><th>{escape(k)}</th><td>{v:.2f}</td></tr>" if isinstance(v, float)
                    else f"<tr><th>{escape(k)}</th><td>{v}</td></tr>" for k, v in sorted(result.costs.items()))
    rounds = "".join(
        f"<tr><td>{r['round']}</td><td>{escape(r['task_id'])}</td><td>{escape(r['question'])}</td>"
        f"<td><code>{escape(r['workflow'])}</code></td><td>{escape(str(r.get('outcome', '')))}</td></tr>"
        for r in result.rounds)
    sections = [f"<h1>{escape(result.question)}</h1>",
                f'<p class="answer">{escape(result.answer or "(no answer)")}</p>',
                f"<p>graph <b>{escape(graph_name)}</b>, stopped: {escape(result.stop_reason or '-')}</p>",
                f"<h2>Costs</h2><table>{costs}</table>"]
    if rounds:
        sections.append("<h2>Rounds</h2><table><tr><th>round</th><th>task</th><th>question</th>"
                        f"<th>workflow</th><th>outcome</th></tr>{rounds}</table>")
    diagrams = topology_diagrams(result.topologies)
    if diagrams:
        sections.append('<h2>Topologies the planner chose</h2><div class="diagrams">'
                        + "".join(diagrams) + "</div>")
    if graph is not None:
        sections.append(f'<h2>The method graph</h2><div class="diagrams">{svg(graph, title=graph_name)}</div>')
    sections.append("<h2>Trace</h2>" + _trace_tree(result))
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'><title>ragteam run</title>"
            f"<style>{_STYLE}</style></head><body>{''.join(sections)}</body></html>")


def _trace_tree(result: RunResult) -> str:
    by_round: dict[int, list] = {}
    for t in result.transitions:
        by_round.setdefault(t.round, []).append(t)
    blocks = []
    for round_ in sorted(by_round):
        calls = []
        for t in sorted(by_round[round_], key=lambda t: t.step):
            flag = ('<span class="ok">ok</span>' if t.format_ok
                    else f'<span class="bad">format: {escape(t.violation)}</span>')
            action = escape(json.dumps(t.action, ensure_ascii=False))
            calls.append(f"<details><summary>[{escape(t.task_id)}] <b>{escape(t.role)}</b> {action} "
                         f"{flag} <small>{t.prompt_tokens}+{t.completion_tokens} tokens</small></summary>"
                         f"<pre>{escape(t.observation)}</pre><pre>{escape(t.completion_text)}</pre></details>")
        blocks.append(f"<details open><summary>round {round_}</summary>{''.join(calls)}</details>")
    return "".join(blocks) or "<p>(no model calls)</p>"


def write_report(result: RunResult, path: str | Path, graph=None, graph_name: str = "") -> Path:
    path = Path(path)
    path.write_text(render_report(result, graph, graph_name), encoding="utf-8")
    return path
