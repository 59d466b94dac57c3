"""`MemoryAdminSaver`: a LangGraph checkpointer (`BaseCheckpointSaver`, sync and async) over memory-admin
(`pip install 'memory-admin-client[langgraph]'`).

A graph compiled with it keeps its execution state on the server: a process that dies mid-run is resumed
by another, on any host, from the last checkpoint (`graph.invoke(None, config)` with the same thread).
Checkpoints belong to a memory user's thread, the same thread its messages go to (the dashboard's
conversation page lists them), and are isolated like the rest of memory: a key of another tenant, or one
limited to other users, does not see them.

The user is `config["configurable"]["user_id"]` (the key is `user_key`), else the saver's `user_id`.
Values are serialised by the saver's serde (LangGraph's `JsonPlusSerializer` by default) and stored as
given; the server keeps the newest `keep_last` checkpoints of each thread and namespace (at most its own
`CHECKPOINT_KEEP_LAST`, 100 by default), so a thread's history is that long.
"""

from __future__ import annotations

import asyncio
import base64
import json
import random
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from memory_admin_client._calls import Call
from memory_admin_client.client import AsyncMemoryAdmin, MemoryAdmin


def _same(data: Any) -> Any:
    return data


class MemoryAdminSaver(BaseCheckpointSaver[str]):
    """`MemoryAdminSaver(MemoryAdmin(url, key), user_id="dana")`, or without `user_id` reading it from each
    run's `configurable`. `async_client` as for `MemoryAdminStore` (else one is made per event loop)."""

    def __init__(
        self,
        client: MemoryAdmin | None = None,
        *,
        async_client: AsyncMemoryAdmin | None = None,
        user_id: str | None = None,
        user_key: str = "user_id",
        keep_last: int | None = None,
        serde: SerializerProtocol | None = None,
    ):
        super().__init__(serde=serde)
        if client is None and async_client is None:
            raise ValueError("give a MemoryAdmin client, an AsyncMemoryAdmin client, or both")
        self.client = client
        self._async_given = async_client
        self._async_made: tuple[asyncio.AbstractEventLoop, AsyncMemoryAdmin] | None = None
        self.user_id = user_id
        self.user_key = user_key
        self.keep_last = keep_last

    # --- requests, written once for both sides ------------------------------------------------------

    def _user(self, config: RunnableConfig | None, *, required: bool = True) -> str | None:
        user = ((config or {}).get("configurable") or {}).get(self.user_key) or self.user_id
        if user is None and required:
            raise ValueError(
                f"no memory user for this checkpoint: set config['configurable'][{self.user_key!r}] "
                "or MemoryAdminSaver(user_id=...)"
            )
        return user

    def _blob(self, value: Any) -> dict[str, str]:
        kind, data = self.serde.dumps_typed(value)
        return {"type": kind, "data": base64.b64encode(data).decode()}

    def _value(self, blob: dict[str, str]) -> Any:
        return self.serde.loads_typed((blob["type"], base64.b64decode(blob["data"])))

    def _config(self, user: str, thread_id: str, ns: str, checkpoint_id: str) -> RunnableConfig:
        return {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint_id,
                self.user_key: user,
            }
        }

    def _put_call(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata
    ) -> tuple[Call, RunnableConfig]:
        conf = config["configurable"]
        user = self._user(config)
        thread_id, ns = str(conf["thread_id"]), conf.get("checkpoint_ns", "")
        full = get_checkpoint_metadata(config, metadata)
        body = {
            "user_id": user,
            "thread_id": thread_id,
            "checkpoint_ns": ns,
            "checkpoint_id": checkpoint["id"],
            "parent_checkpoint_id": conf.get("checkpoint_id") or "",
            "checkpoint": self._blob(checkpoint),
            # As JSON for the server's filters; the serde's form is what comes back.
            "metadata": json.loads(json.dumps(full, default=str)),
            "metadata_blob": self._blob(full),
            "keep_last": self.keep_last,
        }
        return Call("put_checkpoint", {}, _same, body=body), self._config(user, thread_id, ns, checkpoint["id"])

    def _writes_call(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str
    ) -> Call:
        conf = config["configurable"]
        body = {
            "user_id": self._user(config),
            "thread_id": str(conf["thread_id"]),
            "checkpoint_ns": conf.get("checkpoint_ns", ""),
            "checkpoint_id": conf["checkpoint_id"],
            "task_id": task_id,
            "task_path": task_path,
            "writes": [
                {"idx": WRITES_IDX_MAP.get(channel, idx), "channel": channel, "value": self._blob(value)}
                for idx, (channel, value) in enumerate(writes)
            ],
        }
        return Call("put_checkpoint_writes", {}, _same, body=body)

    def _query_call(
        self,
        config: RunnableConfig | None,
        *,
        latest: bool = False,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Call:
        conf = (config or {}).get("configurable") or {}
        body: dict[str, Any] = {"user_id": self._user(config, required=False)}
        if "thread_id" in conf:
            body["thread_id"] = str(conf["thread_id"])
        if latest:  # get_tuple: the root namespace unless one is named
            body["checkpoint_ns"] = conf.get("checkpoint_ns", "")
        elif conf.get("checkpoint_ns") is not None:
            body["checkpoint_ns"] = conf["checkpoint_ns"]
        if config and get_checkpoint_id(config):
            body["checkpoint_id"] = get_checkpoint_id(config)
        if before and get_checkpoint_id(before):
            body["before"] = get_checkpoint_id(before)
        if filter:
            body["filter"] = filter
        if latest:
            body["limit"] = 1
        elif limit is not None:
            body["limit"] = limit
        return Call("query_checkpoints", {}, _same, body=body)

    def _tuple(self, item: dict[str, Any]) -> CheckpointTuple:
        user, thread_id, ns = item["user_id"], item["thread_id"], item["checkpoint_ns"]
        parent = item.get("parent_checkpoint_id")
        return CheckpointTuple(
            config=self._config(user, thread_id, ns, item["checkpoint_id"]),
            checkpoint=self._value(item["checkpoint"]),
            metadata=self._value(item["metadata_blob"]),
            parent_config=self._config(user, thread_id, ns, parent) if parent else None,
            pending_writes=[(w["task_id"], w["channel"], self._value(w["value"])) for w in item["pending_writes"]],
        )

    def _delete_call(self, thread_id: str) -> Call:
        query = {"thread_id": str(thread_id), "user_id": self.user_id}
        return Call("delete_checkpoints", {}, _same, query=query)

    # --- sync ---------------------------------------------------------------------------------------

    def _sync(self) -> MemoryAdmin:
        if self.client is None:
            raise RuntimeError("this saver was given only an async client: use the a* methods")
        return self.client

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        items = self._sync()._run(self._query_call(config, latest=True))["items"]
        return self._tuple(items[0]) if items else None

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        answer = self._sync()._run(self._query_call(config, filter=filter, before=before, limit=limit))
        for item in answer["items"]:
            yield self._tuple(item)

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        call, saved = self._put_call(config, checkpoint, metadata)
        self._sync()._run(call)
        return saved

    def put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        self._sync()._run(self._writes_call(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        self._sync()._run(self._delete_call(thread_id))

    # --- async ------------------------------------------------------------------------------------

    def _async(self) -> AsyncMemoryAdmin:
        if self._async_given is not None:
            return self._async_given
        loop = asyncio.get_running_loop()
        if self._async_made is None or self._async_made[0] is not loop:
            http = self._sync()._http
            key = http.headers.get("Authorization", "").removeprefix("Bearer ") or None
            self._async_made = (loop, AsyncMemoryAdmin(str(http.base_url), key, timeout=http.timeout.read or 30.0))
        return self._async_made[1]

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        items = (await self._async()._run(self._query_call(config, latest=True)))["items"]
        return self._tuple(items[0]) if items else None

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        answer = await self._async()._run(self._query_call(config, filter=filter, before=before, limit=limit))
        for item in answer["items"]:
            yield self._tuple(item)

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        call, saved = self._put_call(config, checkpoint, metadata)
        await self._async()._run(call)
        return saved

    async def aput_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        await self._async()._run(self._writes_call(config, writes, task_id, task_path))

    async def adelete_thread(self, thread_id: str) -> None:
        await self._async()._run(self._delete_call(thread_id))

    def get_next_version(self, current: str | None, channel: None) -> str:
        """Versions as LangGraph's own savers write them: a counter, then a random tie-breaker."""
        if current is None:
            number = 0
        elif isinstance(current, int):
            number = current
        else:
            number = int(str(current).split(".")[0])
        return f"{number + 1:032}.{random.random():016}"
