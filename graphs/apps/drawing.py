"""Pictures of graphs: Mermaid text (LangGraph's own) and SVG laid out by Graphviz's ``dot``.

The SVG is trimmed to embed cleanly in an HTML page that never touches the network: no XML
prolog or DOCTYPE (they name web addresses), no xlink namespace, and a ``ragteam-graph`` class.
Conditional edges are dashed; loops are laid out by ``dot`` like any other edge.

A picture shows the graph its author wrote, with one start and one end: the bookkeeping nodes
ragteam puts around a graph (``ragteam_graph``'s ``prepare → graph → finish``, the same shape
around the fixed-workflow baselines) are left out, and so are the start and end markers of the
subgraphs opened with ``xray``, whose edges are joined through them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import graphviz
from langgraph.constants import END, START
from langgraph.graph import StateGraph
from langgraph.pregel import Pregel

NODE_FILL = "#e9e4ff"
TERMINAL_FILL = "#e8e8e8"


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    conditional: bool


WRAPPER_NODES = ("prepare", "finish")  # the bookkeeping nodes ragteam wraps a graph in


def _function_module(spec) -> str:
    runnable = spec.runnable
    function = getattr(runnable, "func", None) or getattr(runnable, "afunc", None)
    return getattr(function, "__module__", "") or ""


def users_graph(graph):
    """``graph`` without ragteam's wrapper: the one subgraph of a ``START → prepare → graph →
    finish → END`` graph whose ``prepare`` and ``finish`` are ragteam's own code (a user's nodes
    of those names are never taken for it); any other graph as it is."""
    while True:
        builder = getattr(graph, "builder", None)
        if not isinstance(builder, StateGraph) or len(builder.nodes) != 3 or builder.branches:
            return graph
        inner = [name for name in builder.nodes if name not in WRAPPER_NODES]
        if len(inner) != 1 or not isinstance(builder.nodes[inner[0]].runnable, Pregel):
            return graph
        ours = all(_function_module(builder.nodes[name]).startswith("ragteam.graphs.") for name in WRAPPER_NODES)
        shape = {(START, "prepare"), ("prepare", inner[0]), (inner[0], "finish"), ("finish", END)}
        if not ours or set(builder.edges) != shape:
            return graph
        graph = builder.nodes[inner[0]].runnable


def drawable(graph, xray: bool = True):
    """LangGraph's drawable graph of what ``users_graph`` keeps, with each opened subgraph's own
    start and end spliced out (their edges joined), so the picture has one start and one end."""
    picture = users_graph(graph).get_graph(xray=xray)
    inner_terminals = [n for n in picture.nodes if ":" in n and n.rsplit(":", 1)[1] in (START, END)]
    for terminal in inner_terminals:
        into = [e for e in picture.edges if e.target == terminal]
        out_of = [e for e in picture.edges if e.source == terminal]
        picture.remove_node(picture.nodes[terminal])
        for a in into:
            for b in out_of:
                picture.add_edge(picture.nodes[a.source], picture.nodes[b.target],
                                 conditional=a.conditional or b.conditional)
    return picture


def graph_parts(graph, xray: bool = True) -> tuple[list[str], list[Edge], dict[str, str]]:
    """(node ids, edges, labels) of a compiled LangGraph graph, as ``drawable`` shows it."""
    picture = drawable(graph, xray)
    nodes = list(picture.nodes)
    labels = {node_id: _label(node.name or node_id) for node_id, node in picture.nodes.items()}
    edges = [Edge(e.source, e.target, bool(e.conditional)) for e in picture.edges]
    return nodes, edges, labels


def mermaid(graph, xray: bool = True) -> str:
    """The graph as Mermaid text (subgraphs opened with ``xray``), as ``drawable`` shows it."""
    return drawable(graph, xray).draw_mermaid()


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
