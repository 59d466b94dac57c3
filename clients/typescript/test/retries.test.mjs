// Retry rules against a local HTTP server that answers what each test plans: reads are retried on 503 and
// when no answer came, writes never; a 429 is RateLimited with its Retry-After unless waiting is allowed.
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { after, before, beforeEach, test } from "node:test";

import { ConnectionFailed, MemoryAdmin, RateLimited, Unavailable } from "../dist/index.js";

const DOWN = [503, { code: "database_unavailable", detail: "The database cannot be reached; nothing was written." }];
const LIMITED = [429, { code: "rate_limited", detail: "Too many requests; retry later." }, { "Retry-After": "1" }];
const OK = [200, { status: "ok", database: "ok" }];

let plan = [];
let seen = [];
let server;
let base;

before(async () => {
  server = createServer((request, response) => {
    seen.push(request.method);
    const [status, body, headers = {}, delayMs = 0] = plan.shift() ?? OK;
    setTimeout(() => {
      response.writeHead(status, { "Content-Type": "application/json", ...headers });
      response.end(JSON.stringify(body));
    }, delayMs);
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  base = `http://127.0.0.1:${server.address().port}`;
});

after(() => server.close());

beforeEach(() => {
  plan = [];
  seen = [];
});

function client(options = {}) {
  return new MemoryAdmin({ baseUrl: base, apiKey: "mem_x", backoffMs: 5, ...options });
}

test("a read is retried on 503 until it succeeds", async () => {
  plan = [DOWN, DOWN];
  assert.deepEqual(await client().health(), { status: "ok", database: "ok" });
  assert.deepEqual(seen, ["GET", "GET", "GET"]);
});

test("a write is never retried: a lost answer may have been a write", async () => {
  plan = [DOWN];
  await assert.rejects(client().facts.add("dana", "Dana likes tea"), (error) => {
    assert.ok(error instanceof Unavailable);
    assert.equal(error.code, "database_unavailable");
    return true;
  });
  assert.deepEqual(seen, ["POST"]);
});

test("a read gives up after maxRetries further attempts", async () => {
  plan = [DOWN, DOWN, DOWN, DOWN, DOWN];
  await assert.rejects(client({ maxRetries: 2 }).facts.list("dana"), Unavailable);
  assert.deepEqual(seen, ["GET", "GET", "GET"]);
});

test("a 429 is RateLimited with its Retry-After, and is not retried by default", async () => {
  plan = [LIMITED];
  await assert.rejects(client().facts.list("dana"), (error) => {
    assert.ok(error instanceof RateLimited);
    assert.equal(error.retryAfter, 1);
    assert.equal(error.status, 429);
    return true;
  });
  assert.deepEqual(seen, ["GET"]);
});

test("a 429 is waited out when maxRateLimitWait allows its Retry-After, even for a write", async () => {
  plan = [LIMITED, [201, { outcome: "created", reason: "", fact: null }]];
  const started = Date.now();
  const written = await client({ maxRateLimitWait: 2 }).facts.add("dana", "Dana likes tea");
  assert.equal(written.outcome, "created");
  assert.ok(Date.now() - started >= 900, "waited the Retry-After's second");
  assert.deepEqual(seen, ["POST", "POST"]);
});

test("a server that does not answer in time is a ConnectionFailed after the retries", async () => {
  plan = [
    [200, {}, {}, 2000],
    [200, {}, {}, 2000],
  ];
  await assert.rejects(client({ timeoutMs: 200, maxRetries: 1 }).facts.list("dana"), (error) => {
    assert.ok(error instanceof ConnectionFailed && error instanceof Unavailable);
    assert.equal(error.code, "connection_failed");
    return true;
  });
  assert.deepEqual(seen, ["GET", "GET"]);
});

test("a refused connection is a ConnectionFailed", async () => {
  const probe = createServer();
  await new Promise((resolve) => probe.listen(0, "127.0.0.1", resolve));
  const port = probe.address().port;
  await new Promise((resolve) => probe.close(resolve)); // nothing listens there now
  const nowhere = new MemoryAdmin({ baseUrl: `http://127.0.0.1:${port}`, apiKey: "mem_x", backoffMs: 5 });
  await assert.rejects(nowhere.facts.list("dana"), ConnectionFailed);
});

test("the caller's abort is not retried and surfaces as itself", async () => {
  plan = [[200, {}, {}, 2000]];
  const controller = new AbortController();
  setTimeout(() => controller.abort(new Error("caller gave up")), 100);
  await assert.rejects(client().facts.list("dana", {}, { signal: controller.signal }), /caller gave up/);
  assert.deepEqual(seen, ["GET"]);
});

test("requests carry the key, the query and the body as the API expects them", async () => {
  let captured;
  const spy = async (input, init) => {
    captured = { url: String(input), init };
    return new Response(JSON.stringify({ hits: [] }), { status: 200 });
  };
  const api = new MemoryAdmin({ baseUrl: "http://example.test/", apiKey: "mem_k", fetch: spy });
  await api.search("ann/b", "tea?", { k: 3, include: "scores" });
  assert.equal(captured.url, "http://example.test/api/v1/users/ann%2Fb/search?k=3&include=scores&q=tea%3F");
  assert.equal(captured.init.headers.Authorization, "Bearer mem_k");
  await api.skills.get("/deploy/kubernetes.md/");
  assert.equal(captured.url, "http://example.test/api/v1/skills/deploy/kubernetes.md");
  await api.facts.pin("f1", false);
  assert.equal(captured.init.method, "POST");
  assert.equal(captured.init.body, JSON.stringify({ pinned: false }));
  assert.equal(captured.init.headers["Content-Type"], "application/json");
});
