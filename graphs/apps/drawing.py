"""Pictures of graphs: Mermaid text (LangGraph's own) and SVG laid out by Graphviz's ``dot``.

The SVG is trimmed to embed cleanly in an HTML page that never touches the network: no XML
prolog or DOCTYPE (they name web addresses), no xlink namespace, and a ``ragteam-graph`` class.
Conditional edges are dashed; loops are laid out by ``dot`` like any other edge.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import graphviz

NODE_FILL = "#e9e4ff"
TERMINAL_FILL = "#e8e8e8"


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    conditional: bool


def graph_parts(graph, xray: bool = True) -> tuple[list[str], list[Edge], dict[str, str]]:
    """(node ids, edges, labels) of a compiled LangGraph graph."""
    drawable = graph.get_graph(xray=xray)
    nodes = list(drawable.nodes)
    labels = {node_id: _label(node.name or node_id) for node_id, node in drawable.nodes.items()}
    edges = [Edge(e.source, e.target, bool(e.conditional)) for e in drawable.edges]
    return nodes, edges, labels


def mermaid(graph, xray: bool = True) -> str:
    """The graph as Mermaid text (subgraphs opened with ``xray``)."""
    return graph.get_graph(xray=xray).draw_mermaid()


def _label(name: str) -> str:
    return {"__start__": "start", "__end__": "end"}.get(name, name.split(":")[-1])


def dot_source(nodes: list[str], edges: list[Edge], labels: dict[str, str], title: str = "") -> graphviz.Digraph:
    """The graph in DOT. Node ids become n0, n1, … (LangGraph ids hold ':', which DOT reads as
    a port); the labels carry the names."""
    ids = {node: f"n{i}" for i, node in enumerate(nodes)}
    drawing = graphviz.Digraph(graph_attr={"label": title, "labelloc": "t", "fontname": "sans-serif",
                                           "fontsize": "14", "nodesep": "0.35", "ranksep": "0.45"},
                               node_attr={"fontname": "sans-serif", "fontsize": "12", "style": "filled",
                                          "color": "#6b5fb5", "height": "0.4"},
                               edge_attr={"color": "#555555", "arrowsize": "0.7"})
    for node in nodes:
        terminal = node in ("__start__", "__end__")
        drawing.node(ids[node], labels[node], shape="ellipse" if terminal else "box",
                     style="filled" if terminal else "filled,rounded",
                     fillcolor=TERMINAL_FILL if terminal else NODE_FILL)
    for edge in edges:
        drawing.edge(ids[edge.source], ids[edge.target], style="dashed" if edge.conditional else "solid")
    return drawing


def render_svg(nodes: list[str], edges: list[Edge], labels: dict[str, str], title: str = "") -> str:
    raw = dot_source(nodes, edges, labels, title).pipe(format="svg", encoding="utf-8")
    body = raw[raw.index("<svg"):]
    body = re.sub(r"<!--.*?-->\n?", "", body, flags=re.S)
    body = re.sub(r'\s+xmlns:xlink="[^"]*"', "", body)
    return body.replace("<svg ", '<svg class="ragteam-graph" ', 1)


def svg(graph, title: str = "", xray: bool = True) -> str:
    """The graph as an SVG picture laid out by Graphviz's ``dot``, ready to embed in HTML."""
    return render_svg(*graph_parts(graph, xray), title=title)
