// Retrieval, conversations, the notebook, skills, users, export/import/erase and settings on the live server.
import assert from "node:assert/strict";
import { test } from "node:test";

import { Forbidden, MemoryAdmin, NotFound, Unauthorized, VersionConflict } from "../dist/index.js";
import { admin, mem, url, user } from "../testing/live.mjs";

test("search ranks the fact that answers, and the context block holds what the task needs", async () => {
  const erin = user("erin");
  await mem.facts.add(erin, "Erin lives in Lisbon", { source: "user_stated" });
  await mem.facts.add(erin, "Erin is allergic to peanuts", { source: "user_stated" });
  const result = await mem.search(erin, "where does Erin live?", { k: 5 });
  assert.equal(result.hits[0].fact.content, "Erin lives in Lisbon");
  assert.ok(result.hits[0].score.final > 0);
  assert.ok(result.hits[0].score.final >= result.hits.at(-1).score.final);
  const facts = await mem.search(erin, "where does Erin live?", { kinds: "fact" });
  assert.deepEqual(facts.kinds, ["fact"]);
  assert.ok(facts.hits.every((hit) => hit.kind === "fact" && hit.message === null));

  const context = await mem.context(erin, { task: "plan a dinner", budget_tokens: 500 });
  assert.ok(context.tokens <= 500);
  assert.ok(context.text.includes("Erin is allergic to peanuts"));
});

test("a query too long for a URL goes in a JSON body: 2,000 characters of Chinese, searched whole", async () => {
  const mei = user("mei");
  const cat = await mem.facts.add(mei, "我的猫叫小米，它喜欢睡在钢琴上。", { source: "user_stated" });
  await mem.facts.add(mei, "我每天早上七点去公司上班。", { source: "user_stated" });
  const q = "我的猫叫什么名字？它喜欢睡在哪里？".repeat(200).slice(0, 2000);
  // As a URL this is ~18 kB, which gunicorn refuses (414); the client posts it to the same path.
  await assert.rejects(mem.call("search", { path: { user_id: mei }, query: { q } }), (error) => {
    assert.equal(error.status, 414);
    assert.equal(error.code, "request_line_too_long");
    return true;
  });
  const result = await mem.search(mei, q, { k: 5, kinds: "fact" });
  assert.equal(result.query, q);
  assert.equal(result.k, 5);
  assert.equal(result.hits[0].fact.id, cat.fact.id);
  const before = await mem.search(mei, q, { as_of: "2001-01-01T00:00:00Z" });
  assert.deepEqual(before.hits, []);
  const block = await mem.context(mei, { task: q, budget_tokens: 400 });
  assert.equal(block.task, q);
  assert.ok(block.text.includes("小米") && block.tokens <= 400);
  await assert.rejects(mem.search(mei, q + "猫"), (error) => {
    assert.equal(error.status, 422);
    assert.equal(error.body.field, "q");
    return true;
  });
});

test("a chat history is posted as OpenAI's format holds it: text kept, a tool call passed over", async () => {
  const oli = user("oli");
  const accepted = await mem.messages.add(oli, "trip", [
    { role: "developer", content: "You are a helpful travel assistant." },
    { role: "user", content: [{ type: "text", text: "My sister Ana lives in Porto, I visit her in May." }] },
    {
      role: "assistant",
      content: null,
      tool_calls: [{ id: "call_1", type: "function", function: { name: "get_weather", arguments: "{}" } }],
    },
    { role: "tool", tool_call_id: "call_1", content: "Porto: sunny, 24 C all week long" },
  ]);
  assert.equal(accepted.accepted, 3);
  assert.deepEqual(accepted.skipped, [{ index: 2, reason: "no_text" }]);
});

test("search filters by time: what was observed within a period, what was true at a time", async () => {
  const fay = user("fay");
  await mem.facts.add(fay, "Fay went to a folk concert", { source: "user_stated", observed_at: "2023-05-13T20:00:00Z" });
  await mem.facts.add(fay, "Fay went to a jazz concert", { source: "user_stated", observed_at: "2023-09-16T20:00:00Z" });
  const may = await mem.search(fay, "which concert?", { between: "2023-05-01/2023-05-31" });
  assert.deepEqual(
    may.hits.map((hit) => hit.fact.content),
    ["Fay went to a folk concert"],
  );
  const then = await mem.search(fay, "which concert?", { as_of: "2023-06-01T00:00:00Z" });
  assert.deepEqual(
    then.hits.map((hit) => hit.fact.content),
    ["Fay went to a folk concert"],
  );
  const named = await mem.search(fay, "which concert did Fay go to in September 2023?");
  const times = Object.fromEntries(named.hits.map((hit) => [hit.fact.content, hit.score.time]));
  assert.deepEqual(times, { "Fay went to a jazz concert": 1, "Fay went to a folk concert": 0 });
  await assert.rejects(mem.search(fay, "which concert?", { between: "2023-06-01/2023-05-01" }), (error) => {
    assert.equal(error.status, 422);
    assert.equal(error.code, "invalid");
    return true;
  });
});

test("messages go to a thread, closing it schedules its episode, episodes are listed", async () => {
  const jo = user("jo");
  const accepted = await mem.messages.add(jo, "t1", [
    { role: "user", content: "I just moved to Porto, by the way." },
    { role: "assistant", content: "Noted: Porto." },
  ]);
  assert.equal(accepted.thread_id, "t1");
  assert.equal(accepted.accepted, 2);
  assert.equal(accepted.message_ids.length, 2);
  const closed = await mem.threads.close(jo, "t1", { outcome: "success" });
  assert.equal(closed.thread_id, "t1");
  assert.ok(closed.closed_at);
  const episodes = await mem.episodes.list(jo, { thread_id: "t1" });
  assert.ok(Array.isArray(episodes.items));
  for (const episode of episodes.items) assert.deepEqual((await mem.episodes.get(episode.id)).id, episode.id);
  await assert.rejects(mem.episodes.get("00000000-0000-4000-8000-000000000000"), NotFound);
});

test("the notebook is saved over a version and a stale save is a VersionConflict", async () => {
  const fay = user("fay");
  await assert.rejects(mem.notebook.get(fay), NotFound); // reads never create a user
  const first = await mem.notebook.put(fay, "# Fay\n- lives in Oslo", { version: 0 });
  assert.equal(first.version, 1);
  const second = await mem.notebook.put(fay, "# Fay\n- lives in Bergen", { version: 1, note: "moved" });
  assert.equal(second.version, 2);
  await assert.rejects(mem.notebook.put(fay, "# Fay\n- lives in Paris", { version: 1 }), (error) => {
    assert.ok(error instanceof VersionConflict);
    assert.equal(error.currentVersion, 2);
    assert.equal(error.status, 409);
    return true;
  });
  assert.equal((await mem.notebook.get(fay)).content, "# Fay\n- lives in Bergen");
});

test("skills keep the slashes of their path and their versions", async () => {
  const dir = user("deploy");
  const skill = await mem.skills.put(`${dir}/kubernetes.md`, "kubectl apply -f deploy.yaml");
  assert.equal(skill.version, 1);
  assert.equal((await mem.skills.get(`${dir}/kubernetes.md`)).content, "kubectl apply -f deploy.yaml");
  await assert.rejects(
    mem.skills.put(`${dir}/kubernetes.md`, "helm install", { version: 0 }),
    (error) => error instanceof VersionConflict && error.currentVersion === 1,
  );
  await mem.skills.put(`${dir}/fly.md`, "fly deploy");
  assert.deepEqual(
    (await mem.skills.list({ prefix: `${dir}/` })).map((s) => s.path),
    [`${dir}/fly.md`, `${dir}/kubernetes.md`],
  );
  const owner = user("fay");
  const mine = await mem.skills.put(`${dir}/notes.md`, "Fay's shortcuts", { user_id: owner });
  assert.equal(mine.scope, "user");
  assert.equal((await mem.skills.get(`${dir}/notes.md`, { user_id: owner })).user_id, owner);
});

test("memory users are listed by prefix and walked by the cursor", async () => {
  const prefix = user("team");
  for (const name of ["ann", "bob", "cat"]) {
    await mem.facts.add(`${prefix}.${name}`, `${name} likes green tea`, { source: "user_stated" });
  }
  const page = await mem.users.list({ prefix, limit: 2 });
  assert.equal(page.items.length, 2);
  assert.ok(page.next_cursor);
  const ids = [];
  for await (const u of mem.users.iter({ prefix, limit: 2 })) ids.push(u.user_id);
  assert.deepEqual(ids, [`${prefix}.ann`, `${prefix}.bob`, `${prefix}.cat`]);
});

test("export and erase need an admin key; an export imports into another user", async () => {
  const gus = user("gus");
  await mem.facts.add(gus, "Gus plays the oboe", { key: "hobby", source: "user_stated" });
  await mem.facts.add(gus, "Gus plays the bassoon", { key: "hobby", source: "user_stated" });
  await assert.rejects(mem.export(gus), (error) => error instanceof Forbidden && error.status === 403);
  const exported = await admin.export(gus);
  assert.equal(exported.format, "memory-admin/export-v1");
  const copy = user("gus-copy");
  const report = await mem.importUser(copy, exported);
  assert.deepEqual(report.imported, { facts: 2 });
  assert.deepEqual((await mem.importUser(copy, exported)).imported, {});
  const moved = (await mem.facts.list(copy, { status: "any" })).items.map((f) => [f.version, f.content, f.status]);
  assert.deepEqual(moved.sort(), [
    [1, "Gus plays the oboe", "superseded"],
    [2, "Gus plays the bassoon", "active"],
  ]);
  const erased = await admin.erase(gus);
  assert.equal(erased.erased, true);
  await assert.rejects(mem.facts.list(gus), NotFound);
});

test("settings are read and changed with an admin key only", async () => {
  await assert.rejects(mem.settings.get(), Forbidden);
  const before = await admin.settings.get();
  const changed = await admin.settings.patch({ confidence_threshold: 0.65 });
  assert.equal(changed.confidence_threshold, 0.65);
  await admin.settings.patch({ confidence_threshold: before.confidence_threshold });
  assert.ok(Array.isArray(await admin.batches.list({ status: "failed" })));
});

test("health answers without a key, and a wrong key is Unauthorized", async () => {
  const anonymous = new MemoryAdmin({ baseUrl: url, apiKey: "" });
  const health = await anonymous.health();
  assert.ok(["ok", "starting"].includes(health.status));
  assert.equal((await anonymous.call("health_live")).status, "alive");
  const wrong = new MemoryAdmin({ baseUrl: `${url}/api/v1/`, apiKey: "mem_not-a-real-key" });
  await assert.rejects(
    wrong.facts.list("dana"),
    (error) => error instanceof Unauthorized && error.code === "unauthorized",
  );
});
