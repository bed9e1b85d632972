"""A LangChain chat model as the frozen executors of MAO-ARAG, named on the command line:

    ragteam run --graph mao_arag --policy offline \\
        --frozen-policy langchain:examples/chat_model_executors.py:executors "Who wrote Hamlet?"

The planner is ragteam's own model (the one PPO trains); every executor role (query rewriter,
document selector, answer generator…) is played by ``executors``, a langchain-core chat model
that is never trained. The same spec goes in a training config (``frozen_policy:``). Any chat
model works, e.g. a local OpenAI-compatible server::

    from langchain_openai import ChatOpenAI

    def executors():
        return ChatOpenAI(base_url="http://localhost:8000/v1", model="Qwen/Qwen2.5-7B-Instruct", api_key="-")

The stand-in below needs no network: it answers in each role's tags with the first title of the
documents it was given, or restates the question.
"""

import re

from langchain_core.language_models import SimpleChatModel


class FirstTitleReader(SimpleChatModel):
    """Replies by what the prompt asks for: an answer from the first document's title, an
    index, a query or sub-questions restating the question."""

    def _call(self, messages, stop=None, run_manager=None, **kwargs) -> str:
        system, prompt = messages[0].content, messages[-1].content
        question = re.findall(r"Question: (.*)", prompt)[-1:] or [prompt.strip().splitlines()[-1]]
        title = re.search(r"\[0\] ([^:\n]+)", prompt)
        if "<answer>" in system:
            return f"<answer>{title.group(1) if title else 'I do not know'}</answer>"
        if "<id>" in system:
            return "<id>0</id>"
        if "<q1>" in system:
            return f"<q1>{question[0]}</q1>"
        return f"<query>{question[0]}</query>"

    @property
    def _llm_type(self) -> str:
        return "first-title-reader"


def executors():
    return FirstTitleReader()
