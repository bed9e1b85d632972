"""Pictures of graphs and runs: Mermaid + SVG from `ragteam draw`, HTML reports, and a real
headless-Chromium rendering of a report page."""

import itertools
import json
import shutil
import subprocess
import xml.etree.ElementTree as ElementTree

import numpy as np
import pytest
from PIL import Image

from ragteam.graphs.apps.cli import main
from ragteam.graphs.apps.drawing import dot_source, graph_parts
from ragteam.graphs.methods.jade import build_jade_graph
from ragteam.graphs.methods import build_graph, methods
from ragteam.graphs.apps.report import render_report
from ragteam.graphs.run import run
from ragteam.nodes.policies.scripted import ScriptedPolicy, user_content

SVG = "{http://www.w3.org/2000/svg}"
NODE_FILL = (0xE9, 0xE4, 0xFF)


@pytest.mark.parametrize("name", sorted(methods()))
def test_draw_writes_mermaid_and_a_well_formed_svg(name, tmp_path):
    assert main(["draw", "--graph", name, "--out", str(tmp_path)]) == 0
    assert (tmp_path / f"{name}.mmd").read_text().lstrip("-\n").count("graph TD") == 1
    root = ElementTree.parse(tmp_path / f"{name}.svg").getroot()
    labels = {t.text for t in root.iter(f"{SVG}text")}
    nodes, _, names = graph_parts(build_graph(name))
    assert {names[n] for n in nodes} <= labels and {"start", "end"} <= labels


def laid_out_boxes(graph) -> list[tuple[float, float, float, float]]:
    """(left, bottom, right, top) of every node as Graphviz placed it, in points."""
    laid_out = json.loads(dot_source(*graph_parts(graph)).pipe(format="json"))
    boxes = []
    for node in laid_out["objects"]:
        x, y = map(float, node["pos"].split(","))
        half_w, half_h = 36 * float(node["width"]), 36 * float(node["height"])  # inches → points / 2
        boxes.append((x - half_w, y - half_h, x + half_w, y + half_h))
    return boxes


@pytest.mark.parametrize("name", sorted(methods()) + ["workflow"])
def test_layout_never_overlaps_boxes(name):
    from ragteam.graphs.compiler import compile_topology
    from ragteam.nodes.topology import parse_topology

    graph = (compile_topology(parse_topology("[RA|QR,RA],DS,AG")) if name == "workflow"
             else build_graph(name))
    boxes = laid_out_boxes(graph)
    assert len(boxes) == len(graph_parts(graph)[0])
    for a, b in itertools.combinations(boxes, 2):  # every pair, not just neighbours
        assert a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1], (a, b)


def test_draw_accepts_a_workflow_and_rejects_nonsense(tmp_path, capsys):
    assert main(["draw", "--graph", "QR,RA,DS,AG", "--out", str(tmp_path)]) == 0
    assert main(["draw", "--graph", "RA,RA", "--out", str(tmp_path)]) == 2
    assert "neither a graph name nor a valid workflow" in capsys.readouterr().err


@pytest.fixture(scope="module")
def report_html():
    def planner(request):
        if "government position was held" in user_content(request):
            return "<workflow>QDS</workflow>"
        return "<workflow>[RA|QR,RA],DS,AG</workflow>"

    policy = ScriptedPolicy({
        "planner": planner, "QR": "<query>Kiss and Tell cast</query>", "DS": "<id>0</id>",
        "QDS": "<q1>Who portrayed Corliss Archer?</q1><q2>What position did #1 hold?</q2>",
        "AG": ["<answer>Shirley Temple</answer>", "<answer>Chief of Protocol</answer>"],
        "AS": "<answer>Chief of Protocol</answer>"})
    from ragteam.nodes.context import RunContext
    from ragteam.nodes.team import Team
    from ragteam.stores.demo import demo_retriever

    graph = build_jade_graph()
    result = run(graph, "What government position was held by the woman who portrayed Corliss Archer?",
                 RunContext(Team(policy), demo_retriever()))
    return render_report(result, graph, "jade")


def test_report_is_self_contained_with_a_diagram_per_topology(report_html):
    assert report_html.count('class="ragteam-graph"') == 3  # QDS, the parallel workflow, the loop
    assert "<script" not in report_html
    assert "http" not in report_html.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "Chief of Protocol" in report_html and "[RA|QR,RA],DS,AG" in report_html


def test_cli_run_writes_a_report(tmp_path):
    out = tmp_path / "run.html"
    assert main(["run", "--policy", "scripted", "--report", str(out), "Who is Shirley Temple?"]) == 0
    assert 'class="ragteam-graph"' in out.read_text()


def test_headless_chromium_renders_the_report_diagrams(report_html, tmp_path):
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "Debian's chromium is required (make test installs it)"
    page = tmp_path / "report.html"
    page.write_text(report_html)
    flags = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
             "--no-first-run", "--disable-background-networking", "--disable-component-update",
             "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run(flags + ["--dump-dom", page.as_uri()], capture_output=True, text=True,
                         timeout=120).stdout
    assert dom.count("<svg") == 3 and dom.count('class="node"') >= 10
    shot = tmp_path / "report.png"
    subprocess.run(flags + [f"--screenshot={shot}", "--window-size=1200,1600", page.as_uri()],
                   capture_output=True, timeout=120, check=True)
    pixels = np.asarray(Image.open(shot).convert("RGB"))
    node_pixels = int((pixels == NODE_FILL).all(axis=-1).sum())
    assert node_pixels > 2000, "the diagrams' node boxes were not painted"
