// The client's operation table is the live schema's: every operation, under its id, method and path.
import assert from "node:assert/strict";
import { test } from "node:test";

import { OPERATIONS } from "../dist/index.js";
import { url } from "../testing/live.mjs";

test("the client covers every operation of the served OpenAPI document", async () => {
  const document = await (await fetch(`${url}/api/v1/openapi.json`)).json();
  const served = {};
  for (const [path, item] of Object.entries(document.paths)) {
    for (const [method, operation] of Object.entries(item)) {
      served[operation.operationId] = [method.toUpperCase(), path.replace(/^\/api\/v1/, "")];
    }
  }
  assert.deepEqual(OPERATIONS, served);
});
