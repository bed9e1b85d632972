import os
from pathlib import Path

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("RAGTEAM_CACHE_DIR", str(Path(__file__).resolve().parents[1] / ".cache" / "ragteam"))

from nodes.context import RunContext, Settings  # noqa: E402
from nodes.scripted_policy import ScriptedPolicy  # noqa: E402
from nodes.team import Team  # noqa: E402
from stores.demo import demo_retriever  # noqa: E402


@pytest.fixture
def make_ctx():
    def factory(rules, retriever=None, **settings):
        policy = rules if not isinstance(rules, dict) else ScriptedPolicy(rules)
        return RunContext(Team(policy), retriever or demo_retriever(), Settings(**settings))
    return factory


@pytest.fixture(scope="session")
def offline_policy():
    from graphs.policies import load_policy
    return load_policy("offline")
