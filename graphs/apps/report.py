"""A self-contained HTML page for one run: answer, costs, the method graph, a diagram of every
topology the planner chose, and the call trace with each call's observation and completion.
Rendered from ``templates/report.html`` with Jinja2 (autoescaping on: model text is untrusted).
Inline CSS and SVG only — no scripts, no network — so it opens anywhere, offline."""

from __future__ import annotations

from ragteam.stores.text import clean_text

from itertools import groupby
from pathlib import Path

from jinja2 import Environment, PackageLoader, select_autoescape

from ragteam.graphs.apps.drawing import svg
from ragteam.graphs.compiler import compile_topology
from ragteam.graphs.run import RunResult
from ragteam.nodes.topology import Topology, parse_topology

_TEMPLATES = Environment(loader=PackageLoader("ragteam.graphs.apps", "templates"),
                         autoescape=select_autoescape(["html"]), trim_blocks=True, lstrip_blocks=True)


def topology_diagrams(topologies: list[str]) -> list[str]:
    """One SVG per distinct valid topology, in order of first use."""
    drawn: dict[Topology, str] = {}
    for text in topologies:
        topology = parse_topology(text)
        if isinstance(topology, Topology) and topology not in drawn:
            drawn[topology] = svg(compile_topology(topology), title=str(topology))
    return list(drawn.values())


def render_report(result: RunResult, graph=None, graph_name: str = "") -> str:
    costs = [(k, f"{v:.2f}" if isinstance(v, float) else v) for k, v in sorted(result.costs.items())]
    calls = sorted(result.transitions, key=lambda t: (t.turn, t.step))
    turns = [(turn, list(group)) for turn, group in groupby(calls, key=lambda t: t.turn)]
    return _TEMPLATES.get_template("report.html").render(
        result=result, graph_name=graph_name, costs=costs, turns=turns,
        topology_svgs=topology_diagrams(result.topologies),
        graph_svg=svg(graph, title=graph_name) if graph is not None else "")


def write_report(result: RunResult, path: str | Path, graph=None, graph_name: str = "") -> Path:
    path = Path(path)
    # model text may hold lone surrogates (API chat models return them): not UTF-8, so replaced
    path.write_text(clean_text(render_report(result, graph, graph_name)), encoding="utf-8")
    return path
