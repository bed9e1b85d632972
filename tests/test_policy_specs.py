"""Policy specs, one table of kinds (nodes/policies/spec.py): each refused in one line before
anything loads, and a langchain chat model of one's own playing frozen roles from the command line."""

import json
from pathlib import Path

import pytest

from ragteam.graphs.apps.cli import main
from ragteam.nodes.policies.spec import POLICY_KINDS, check_policy_spec, load_policy

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "chat_model_executors.py"
QUESTION = "Who portrayed Corliss Archer in the film Kiss and Tell?"


def test_every_kind_is_listed_where_an_unknown_spec_is_refused():
    with pytest.raises(ValueError) as refused:
        check_policy_spec("nonsense")
    assert all(kind.usage in str(refused.value) for kind in POLICY_KINDS.values())
    for spec in ("scripted:x", "hf", "rules", "langchain"):  # an argument where none goes, none where one must
        with pytest.raises(ValueError, match="unknown policy"):
            check_policy_spec(spec)


def test_the_examples_chat_model_plays_mao_arags_executors_from_the_command_line(tmp_path, capsys):
    trace = tmp_path / "t.jsonl"
    assert main(["run", "--graph", "mao_arag", "--policy", "scripted", "--frozen-policy",
                 f"langchain:{EXAMPLE}:executors", "--trace-out", str(trace), "--json", QUESTION]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["answer"] == "Kiss and Tell (1945 film)" and result["costs"]["format_violations"] == 0
    calls = [json.loads(line) for line in trace.read_text().splitlines()]
    assert {c["role"]: c["policy"] for c in calls} == {"planner": "scripted-plumbing",
                                                        "AG": f"langchain:{EXAMPLE}:executors"}
    assert not any(c["trained"] for c in calls if c["role"] == "AG")  # frozen: never trained


@pytest.mark.parametrize("source, message", [
    ("x = 3\n", "x is int, not a langchain chat model"),
    ("def x():\n    raise RuntimeError('no key')\n", r"x\(\) raised RuntimeError: no key"),
    ("import sys\nsys.exit(3)\n", "importing .* raised SystemExit\\(3\\)"),
    ("y = 1\n", "x is NoneType, not a langchain chat model"),
])
def test_a_chat_model_reference_that_is_not_one_is_one_line(source, message, tmp_path):
    path = tmp_path / "models.py"
    path.write_text(source)
    check_policy_spec(f"langchain:{path}:x")  # the reference's shape: nothing imported yet
    with pytest.raises(ValueError, match=message) as refused:
        load_policy(f"langchain:{path}:x")
    assert "\n" not in str(refused.value)


def test_a_chat_model_reference_to_nothing_is_refused_before_anything_loads(tmp_path):
    with pytest.raises(ValueError, match="no file"):
        check_policy_spec(f"langchain:{tmp_path / 'none.py'}:x")
    with pytest.raises(ValueError, match="write it as langchain:path/to/file.py:NAME"):
        check_policy_spec("langchain:models")


def test_the_methods_guides_chat_model_command_parses_and_its_reference_resolves():
    """docs/methods.md's command as printed: its flags parse and its --frozen-policy names the
    example file (the run itself is the test above, on the scripted planner)."""
    import re
    import shlex

    from ragteam.graphs.apps.cli import _parser

    [block] = [b for b in re.findall(r"```bash\n(.*?)```", (ROOT / "docs" / "methods.md").read_text(), re.S)
               if "langchain:" in b]
    argv = shlex.split(block.replace("\\\n", " "))
    assert argv[0] == "ragteam"
    args = _parser().parse_args(argv[1:])
    assert args.frozen_policy == "langchain:examples/chat_model_executors.py:executors"
    check_policy_spec(args.frozen_policy.replace("examples/", f"{ROOT}/examples/"))
