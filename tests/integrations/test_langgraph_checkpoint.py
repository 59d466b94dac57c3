"""`MemoryAdminSaver` (a LangGraph checkpointer in the client distribution) against the live API:
LangGraph's own conformance suite, the same graph history as `InMemorySaver`, a graph killed with SIGKILL
between nodes that resumes in a new process, retention, and isolation between tenants and users."""

from __future__ import annotations

import asyncio
import operator
import os
import signal
import subprocess
import sys
import time
import uuid
from typing import Annotated, TypedDict

import pytest
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from memory_admin_client import MemoryAdmin, NotFound
from memory_admin_client.checkpoint import MemoryAdminSaver

from memory_admin.models import Checkpoint, CheckpointWrite, Thread
from memory_admin.services.tenants import tenant_create
from tests.integrations.conftest import CLIENT_SRC, ROOT

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def key(tenant, make_key):
    return make_key(tenant)


@pytest.fixture
def client(gunicorn_server, key):
    with MemoryAdmin(gunicorn_server, key) as client:
        yield client


def test_langgraphs_conformance_suite_passes(client):
    @checkpointer_test(name="MemoryAdminSaver")
    async def saver():
        yield MemoryAdminSaver(client, user_id="conformance")

    report = asyncio.run(validate(saver))
    failures = [f"{name}: {failure}" for name, result in report.results.items() for failure in result.failures]
    assert report.passed_all_base(), failures


class State(TypedDict):
    question: str
    notes: Annotated[list[str], operator.add]


def research_graph():
    graph = StateGraph(State)
    graph.add_node("look", lambda s: {"notes": [f"looked up {s['question']}"]})
    graph.add_node("think", lambda s: {"notes": [f"{len(s['notes'])} notes so far"]})
    graph.add_node("answer", lambda s: {"notes": ["answered"]})
    graph.add_edge(START, "look")
    graph.add_edge("look", "think")
    graph.add_edge("think", "answer")
    graph.add_edge("answer", END)
    return graph


def history(app, config):
    """What a user sees of a thread's history: each state's values, next nodes and step, newest first."""
    return [(s.values, s.next, s.metadata["step"], s.metadata["source"]) for s in app.get_state_history(config)]


def test_a_graph_keeps_the_same_history_as_with_the_in_memory_saver(client):
    runs = []
    for saver in (InMemorySaver(), MemoryAdminSaver(client)):
        app = research_graph().compile(checkpointer=saver, interrupt_before=["answer"])
        config = {"configurable": {"thread_id": "research-1", "user_id": "uma"}}
        first = app.invoke({"question": "tides", "notes": []}, config)
        paused = app.get_state(config).next
        final = app.invoke(None, config)  # resume after the interrupt
        second = app.invoke({"question": "moons", "notes": []}, config)
        runs.append((first, paused, final, second, history(app, config)))
    assert runs[0][1] == ("answer",)
    assert runs[1] == runs[0]


def test_a_graph_killed_between_nodes_resumes_from_its_last_checkpoint_in_a_new_process(gunicorn_server, key, tmp_path):
    script = ROOT / "tests" / "integrations" / "langgraph_resumable_run.py"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(CLIENT_SRC), str(ROOT)])}
    log = tmp_path / "nodes.log"
    thread = f"move-{uuid.uuid4().hex[:8]}"
    args = [sys.executable, str(script), gunicorn_server, key, thread, str(log)]

    first = subprocess.Popen([*args, "hang"], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert first.stdout.readline().strip() == "working"  # plan is done, work is running
        # LangGraph's default durability ("async") saves in the background while the next node runs, and a crash
        # can lose what was not saved yet. Plan ran from the checkpoint of step 0; its result is saved as that
        # checkpoint's pending writes (they may arrive before the checkpoint itself), then folded into step 1's.
        # Kill as soon as step 0 and plan's writes are both on the server, whether or not step 1 is.
        deadline = time.monotonic() + 30
        ours = {"thread__external_id": thread}
        while not (
            Checkpoint.objects.filter(**ours, metadata__step=0).exists()
            and CheckpointWrite.objects.filter(**ours, channel="branch:to:work").exists()
        ):
            assert time.monotonic() < deadline, "plan's result never reached the server"
            time.sleep(0.05)
        os.kill(first.pid, signal.SIGKILL)
    finally:
        first.wait(timeout=30)
    assert first.returncode == -signal.SIGKILL

    second = subprocess.run([*args, "run"], capture_output=True, text=True, env=env, timeout=120)
    assert second.returncode == 0, second.stderr[-2000:]
    assert second.stdout.strip() == "done plan:moving house,work:moving house,report:moving house"
    ran = [line.split() for line in log.read_text().splitlines()]
    # plan ran once, in the killed process; work started there and ran again, with report, in the new one.
    assert [name for name, _ in ran] == ["plan", "work", "work", "report"]
    assert ran[0][1] == ran[1][1] == str(first.pid) and ran[2][1] == ran[3][1] != str(first.pid)
    assert Checkpoint.objects.filter(thread__external_id=thread, memory_user__external_id="rita").count() >= 4


def test_retention_keeps_the_newest_checkpoints_of_a_thread(client):
    saver = MemoryAdminSaver(client, keep_last=3)
    app = research_graph().compile(checkpointer=saver)
    config = {"configurable": {"thread_id": "long-1", "user_id": "vic"}}
    for question in ("a", "b", "c"):
        app.invoke({"question": question, "notes": []}, config)
    kept = list(saver.list(config))
    assert len(kept) == 3
    assert kept[0].checkpoint["channel_values"]["notes"][-1] == "answered"  # the newest is among them
    assert app.get_state(config).values["notes"][-1] == "answered"
    assert Checkpoint.objects.filter(thread__external_id="long-1").count() == 3


def test_checkpoints_are_isolated_between_tenants_and_users(gunicorn_server, client, tenant, make_key):
    saver = MemoryAdminSaver(client)
    app = research_graph().compile(checkpointer=saver)
    config = {"configurable": {"thread_id": "private-1", "user_id": "wes"}}
    app.invoke({"question": "salary", "notes": []}, config)
    assert saver.get_tuple(config) is not None

    other = tenant_create(slug="checkpoint-other")
    with MemoryAdmin(gunicorn_server, make_key(other)) as foreign:
        outsider = MemoryAdminSaver(foreign)
        assert outsider.get_tuple(config) is None
        assert list(outsider.list(None)) == []
        outsider.delete_thread("private-1")  # deletes nothing of the other tenant
    with MemoryAdmin(gunicorn_server, make_key(tenant, users=["zoe"])) as limited:
        narrow = MemoryAdminSaver(limited)
        assert narrow.get_tuple(config) is None and list(narrow.list(None)) == []
        with pytest.raises(NotFound):  # a key limited to other users cannot write this user's thread
            research_graph().compile(checkpointer=narrow).invoke({"question": "x", "notes": []}, config)
    assert saver.get_tuple(config).checkpoint["channel_values"]["notes"][-1] == "answered"

    saver.delete_thread("private-1")
    assert saver.get_tuple(config) is None
    assert Thread.objects.filter(external_id="private-1").exists()  # the conversation itself stays


def test_a_chat_thread_keeps_its_message_objects_across_savers(client):
    """The common case: a MessagesState conversation continued by a second saver (another process would
    build the same), its messages back as LangChain message objects with their ids and tool calls."""
    from langchain_core.messages import AIMessage, HumanMessage
    from langgraph.graph import MessagesState

    def reply(state):
        asked = state["messages"][-1].content
        call = {"name": "lookup", "args": {"q": asked}, "id": f"call-{len(state['messages'])}"}
        return {"messages": [AIMessage(content=f"You said: {asked}", tool_calls=[call])]}

    graph = StateGraph(MessagesState)
    graph.add_node("reply", reply)
    graph.add_edge(START, "reply")
    graph.add_edge("reply", END)
    config = {"configurable": {"thread_id": "chat-1", "user_id": "yan"}}
    graph.compile(checkpointer=MemoryAdminSaver(client)).invoke({"messages": [HumanMessage("hello")]}, config)

    later = graph.compile(checkpointer=MemoryAdminSaver(client))
    out = later.invoke({"messages": [HumanMessage("and again")]}, config)
    kinds = [(type(m).__name__, m.content) for m in out["messages"]]
    assert kinds == [
        ("HumanMessage", "hello"),
        ("AIMessage", "You said: hello"),
        ("HumanMessage", "and again"),
        ("AIMessage", "You said: and again"),
    ]
    assert out["messages"][1].tool_calls[0]["args"] == {"q": "hello"} and all(m.id for m in out["messages"])
