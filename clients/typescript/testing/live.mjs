// What the live tests need: the server (MEMORY_ADMIN_URL), an agent key (MEMORY_ADMIN_API_KEY) and an admin
// key of the same tenant (MEMORY_ADMIN_ADMIN_KEY). tests/integrations/test_typescript_client.py starts the
// server on the test database, makes the keys and the entity graph the entity tests read, and runs them.
import { randomUUID } from "node:crypto";

import { MemoryAdmin } from "../dist/index.js";

function required(name) {
  const value = process.env[name];
  if (!value)
    throw new Error(`${name} is not set: run these tests through tests/integrations/test_typescript_client.py`);
  return value;
}

export const url = required("MEMORY_ADMIN_URL");
export const agentKey = required("MEMORY_ADMIN_API_KEY");
export const adminKey = required("MEMORY_ADMIN_ADMIN_KEY");

export const mem = new MemoryAdmin({ baseUrl: url, apiKey: agentKey });
export const admin = new MemoryAdmin({ baseUrl: url, apiKey: adminKey });

/** A memory user id of its own for each test, so that the tests neither see nor disturb each other. */
export function user(name) {
  return `${name}-${randomUUID().slice(0, 8)}`;
}

export const SECRET = "sk-proj-" + "Z9".repeat(24); // looks like an OpenAI key: always blocked
