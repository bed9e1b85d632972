"""Tutorial: a graph of your own with a role of your own — a verifier (VF) checks the answer
against the passages; when it fails, the question is rewritten for one more retrieval.

    ragteam run --graph examples/verified_rag.py:graph --policy scripted "Who is Ed Wood?"
    ragteam draw --graph examples/verified_rag.py:graph --out pictures/
    ragteam eval --graph vanilla_rag,examples/verified_rag.py:graph --out runs/verified
    ragteam studio examples/verified_rag.py:graph && langgraph dev --config langgraph.ragteam.json --host 127.0.0.1
    python trainers/ppo_graph.py --graph examples/verified_rag.py:graph --steps 2
"""
from langgraph.graph import END, START, StateGraph

import ragteam as rt

VF = rt.Role(name="VF", instruction="Do the documents support the answer to the question? "
             "Reply <verdict>yes</verdict> or <verdict>no</verdict>.",
             render=lambda o: f"{rt.documents_block(o['documents'])}Question: {o['question']}\nAnswer: {o['answer']}",
             parse=rt.tag_choice("verdict", ("yes", "no"), fallback="yes"), stop=("</verdict>",),
             shots=tuple((f"Documents:\n[0] Paris: Paris is the capital of France.\n\nQuestion: What is the capital "
                          f"of France?\nAnswer: {a}", f"<verdict>{v}</verdict>") for a, v in (("Paris", "yes"), ("Lyon", "no"))),
             max_new_tokens=12, plumbing="<verdict>yes</verdict>")  # plumbing: what --policy scripted replies


class State(rt.WorkflowState, total=False):
    verdict: str
    turns: int          # the graph contract's loop count: one per verification
    stop_reason: str


def verify_observation(state: State) -> dict:
    return {"question": state["question"], "answer": state["answer"], "documents": tuple(state["selected"])}


builder = StateGraph(State)
builder.add_node("RA", rt.retriever("RA"))
builder.add_node("DS", rt.document_selector("DS"))
builder.add_node("AG", rt.answer_generator("AG"))
builder.add_node("VF", rt.role_node(VF, verify_observation,
                                    lambda verdict, s: {"verdict": verdict, "turns": s.get("turns", 0) + 1}))
builder.add_node("QR", rt.query_rewriter("QR"))
builder.add_node("done", lambda s: {"stop_reason": "verified" if s["verdict"] == "yes" else "unverified"})
builder.add_edge(START, "RA")
builder.add_edge("RA", "DS")
builder.add_edge("DS", "AG")
builder.add_edge("AG", "VF")
builder.add_conditional_edges("VF", lambda s: "done" if s["verdict"] == "yes" or s["turns"] >= 2 else "QR",
                              ["done", "QR"])
builder.add_edge("QR", "RA")
builder.add_edge("done", END)
graph = rt.ragteam_graph(builder.compile(name="verified_rag"), outputs=["verdict"])
