"""Pictures of graphs that open offline: Mermaid text and a self-drawn SVG.

LangGraph can emit Mermaid, but turning it into an image needs a web service or graphviz. The
graphs here are small (a dozen nodes), so a simple layered layout is enough: back edges (loops)
are found by depth-first search, every other node sits one layer below its deepest parent, and
loops are drawn as arcs down the right-hand side. Conditional edges are dashed.
"""

from __future__ import annotations

from dataclasses import dataclass
from html import escape

BOX_H, LAYER_GAP, COL_GAP, CHAR_W, PAD = 34, 70, 36, 7.4, 14


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
    return graph.get_graph(xray=xray).draw_mermaid()


def _label(name: str) -> str:
    return {"__start__": "start", "__end__": "end"}.get(name, name.split(":")[-1])


def _back_edges(nodes: list[str], edges: list[Edge]) -> set[tuple[str, str]]:
    children: dict[str, list[str]] = {n: [] for n in nodes}
    for edge in edges:
        children[edge.source].append(edge.target)
    state: dict[str, int] = {}  # 1 = on the DFS stack, 2 = finished
    back: set[tuple[str, str]] = set()

    def visit(node: str) -> None:
        state[node] = 1
        for child in children[node]:
            if state.get(child) == 1:
                back.add((node, child))
            elif child not in state:
                visit(child)
        state[node] = 2

    for root in ["__start__"] + nodes:
        if root in children and root not in state:
            visit(root)
    return back


def layout(nodes: list[str], edges: list[Edge], labels: dict[str, str]):
    """Boxes {id: (x, y, width)}, each forward edge's waypoints, and the set of back edges.

    Edges that skip layers get one invisible waypoint per skipped layer, which takes room in its
    row, so long edges run between boxes instead of through them; rows are ordered by the mean
    position of each node's parents (one barycenter sweep) to limit crossings."""
    back = _back_edges(nodes, edges)
    forward = [e for e in edges if (e.source, e.target) not in back]
    layer = {n: 0 for n in nodes}
    for _ in nodes:  # longest-path layering; a DAG settles within len(nodes) passes
        for e in forward:
            layer[e.target] = max(layer[e.target], layer[e.source] + 1)
    widths = {n: max(64.0, len(labels[n]) * CHAR_W + 2 * PAD) for n in nodes}
    parents: dict[str, list[str]] = {n: [] for n in nodes}
    chains: dict[int, list[str]] = {}  # edge index -> [source, waypoints..., target]
    for i, e in enumerate(forward):
        chain = [e.source]
        for depth in range(layer[e.source] + 1, layer[e.target]):
            waypoint = f"~{i}~{depth}"
            layer[waypoint], widths[waypoint], parents[waypoint] = depth, 12.0, [chain[-1]]
            chain.append(waypoint)
        parents[e.target].append(chain[-1])
        chain.append(e.target)
        chains[i] = chain
    rows: dict[int, list[str]] = {}
    for n in layer:
        rows.setdefault(layer[n], []).append(n)
    position: dict[str, float] = {}
    for r in sorted(rows):
        rows[r].sort(key=lambda n: sum(position.get(p, 0) for p in parents[n]) / max(len(parents[n]), 1))
        position.update({n: i for i, n in enumerate(rows[r])})
    row_widths = {r: sum(widths[n] for n in ns) + COL_GAP * (len(ns) - 1) for r, ns in rows.items()}
    canvas = max(row_widths.values())
    boxes = {}
    for r, ns in rows.items():
        x = (canvas - row_widths[r]) / 2
        for n in ns:
            boxes[n] = (x, r * (BOX_H + LAYER_GAP), widths[n])
            x += widths[n] + COL_GAP
    return boxes, {forward[i]: chain for i, chain in chains.items()}, back


def _port(boxes, node: str, margin: float, top: float, side: str) -> tuple[float, float]:
    """Where an edge leaves (bottom centre) or enters (top centre) a box; waypoints are points."""
    x, y, w = boxes[node]
    if node.startswith("~"):
        return x + w / 2 + margin, y + top + BOX_H / 2
    return x + w / 2 + margin, y + top + (BOX_H if side == "out" else 0)


def svg(graph, title: str = "", xray: bool = True) -> str:
    nodes, edges, labels = graph_parts(graph, xray)
    return render_svg(nodes, edges, labels, title)


def render_svg(nodes: list[str], edges: list[Edge], labels: dict[str, str], title: str = "") -> str:
    boxes, chains, back = layout(nodes, edges, labels)
    margin, loop_room = 20, 60 if back else 0
    width = max(x + w for x, _, w in boxes.values()) + 2 * margin + loop_room
    height = max(y for _, y, _ in boxes.values()) + BOX_H + 2 * margin + (24 if title else 0)
    top = margin + (24 if title else 0)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="ragteam-graph" width="{width:.0f}" '
             f'height="{height:.0f}" viewBox="0 0 {width:.0f} {height:.0f}" font-family="sans-serif" '
             'font-size="13">',
             '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
             'markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#555"/>'
             '</marker></defs>']
    if title:
        parts.append(f'<text x="{margin}" y="{margin + 4}" font-weight="bold">{escape(title)}</text>')
    right_edge = max(x + w for x, _, w in boxes.values()) + margin
    for i, e in enumerate(edges):
        sx, sy, sw = boxes[e.source]
        tx, ty, tw = boxes[e.target]
        dash = ' stroke-dasharray="5,4"' if e.conditional else ""
        if (e.source, e.target) in back:  # loop: leave right, arc down the side, come back in
            bend = right_edge + 18 + 10 * (i % 3)
            path = (f"M{sx + sw + margin:.1f},{sy + top + BOX_H / 2:.1f} C{bend:.1f},{sy + top:.1f} "
                    f"{bend:.1f},{ty + top + BOX_H:.1f} {tx + tw + margin:.1f},{ty + top + BOX_H / 2:.1f}")
        else:  # down through the waypoints: one vertical S-curve per layer crossed
            chain = chains[e]
            path = "M{:.1f},{:.1f}".format(*_port(boxes, chain[0], margin, top, "out"))
            for a, b in zip(chain, chain[1:]):
                (x1, y1), (x2, y2) = _port(boxes, a, margin, top, "out"), _port(boxes, b, margin, top, "in")
                mid = (y1 + y2) / 2
                path += f" C{x1:.1f},{mid:.1f} {x2:.1f},{mid:.1f} {x2:.1f},{y2:.1f}"
        parts.append(f'<path class="edge" d="{path}" fill="none" stroke="#555" stroke-width="1.4"'
                     f'{dash} marker-end="url(#arrow)"/>')
    for n in nodes:  # waypoints ("~…") exist only in the layout, not in ``nodes``
        x, y, w = boxes[n]
        terminal = n in ("__start__", "__end__")
        fill = "#e8e8e8" if terminal else "#e9e4ff"
        radius = BOX_H / 2 if terminal else 6
        parts.append(f'<g class="node"><rect x="{x + margin:.1f}" y="{y + top:.1f}" width="{w:.1f}" '
                     f'height="{BOX_H}" rx="{radius:.0f}" fill="{fill}" stroke="#6b5fb5"/>'
                     f'<text x="{x + margin + w / 2:.1f}" y="{y + top + BOX_H / 2 + 4.5:.1f}" '
                     f'text-anchor="middle">{escape(labels[n])}</text></g>')
    parts.append("</svg>")
    return "\n".join(parts)
