"""A real LangGraph graph checkpointed by MemoryAdminSaver, run as its own process by
test_langgraph_checkpoint.py: `plan -> work -> report`. Each node appends its name and this process's
pid to the file given as argv[4]; `work` stops for a minute when argv[5] is "hang" (the test kills the
process there). argv: base URL, API key, thread id, log file, "hang" or "run"."""

from __future__ import annotations

import operator
import os
import sys
import time
from typing import Annotated, TypedDict

from langgraph.graph import END, START, StateGraph
from memory_admin_client import MemoryAdmin
from memory_admin_client.checkpoint import MemoryAdminSaver


class State(TypedDict):
    topic: str
    steps: Annotated[list[str], operator.add]


def main() -> None:
    url, key, thread_id, log_path, mode = sys.argv[1:6]

    def node(name: str):
        def run(state: State) -> dict:
            with open(log_path, "a") as log:
                log.write(f"{name} {os.getpid()}\n")
            if name == "work" and mode == "hang":
                print("working", flush=True)
                time.sleep(60)
            return {"steps": [f"{name}:{state['topic']}"]}

        return run

    graph = StateGraph(State)
    for name in ("plan", "work", "report"):
        graph.add_node(name, node(name))
    graph.add_edge(START, "plan")
    graph.add_edge("plan", "work")
    graph.add_edge("work", "report")
    graph.add_edge("report", END)
    with MemoryAdmin(url, key) as client:
        app = graph.compile(checkpointer=MemoryAdminSaver(client))
        config = {"configurable": {"thread_id": thread_id, "user_id": "rita"}}
        # A run is unfinished while its latest state has a task to run or a task whose result is saved but not yet
        # folded into a checkpoint: between those two saves LangGraph's `next` is empty although the run is not over.
        state = app.get_state(config)
        resuming = bool(state.next or state.tasks)
        out = app.invoke(None if resuming else {"topic": "moving house", "steps": []}, config)
        print("done", ",".join(out["steps"]), flush=True)


if __name__ == "__main__":
    main()
