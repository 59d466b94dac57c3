// The knowledge graph on the live server. The pytest wrapper stores, for the user "graph-owner", "Bob Smith
// works at Initech." (Bob Smith works_at Initech) and "Robert Smith lives in Lisbon.".
import assert from "node:assert/strict";
import { test } from "node:test";

import { AlreadyResolved, EntityAliasUnknown, EntityMerged, Forbidden, NotFound } from "../dist/index.js";
import { admin, mem } from "../testing/live.mjs";

async function entityNamed(name) {
  const page = await mem.entities.search(name, { user_id: "graph-owner" });
  const found = page.items.find((e) => e.name === name);
  assert.ok(found, `${name} is in the seeded graph`);
  return found;
}

test("the graph is read: search, detail with facts and relations, the neighbourhood", async () => {
  const bob = await entityNamed("Bob Smith");
  const detail = await mem.entities.get(bob.id);
  assert.equal(detail.merged_into, null);
  assert.deepEqual(
    detail.facts.map((f) => f.content),
    ["Bob Smith works at Initech."],
  );
  assert.deepEqual(
    detail.relations.map((r) => [r.subject.name, r.type, r.object.name]),
    [["Bob Smith", "works_at", "Initech"]],
  );
  const around = await mem.entities.graph(bob.id, { depth: 2 });
  assert.deepEqual(new Set(around.nodes.map((n) => n.name)), new Set(["Bob Smith", "Initech"]));
  await assert.rejects(mem.entities.get("00000000-0000-4000-8000-000000000000"), NotFound);
  await assert.rejects(mem.entities.rename(bob.id, "Mallory"), Forbidden); // an agent key reads, never curates
});

test("an admin key merges and undoes, splits, renames, closes and reopens a relation", async () => {
  const bob = await entityNamed("Bob Smith");
  const robert = await entityNamed("Robert Smith");
  const merge = await admin.entities.merge(bob.id, robert.id, { note: "same person" });
  assert.equal(merge.loser.merged_into, bob.id);
  assert.ok(merge.survivor.aliases.includes("Robert Smith"));
  await assert.rejects(admin.entities.rename(robert.id, "Rob"), EntityMerged);
  await admin.entities.undoMerge(merge.id);
  await assert.rejects(admin.entities.undoMerge(merge.id), AlreadyResolved);
  assert.equal((await admin.entities.get(robert.id)).merged_into, null);

  await assert.rejects(admin.entities.split(bob.id, "Nobody At All"), EntityAliasUnknown);
  const renamed = await admin.entities.rename(bob.id, "Robert 'Bob' Smith", { note: "full name" });
  assert.equal(renamed.name, "Robert 'Bob' Smith");
  assert.ok(renamed.aliases.includes("Bob Smith"));

  const relation = (await admin.entities.get(bob.id)).relations[0];
  const closed = await admin.relations.close(relation.id, { note: "left the company" });
  assert.ok(closed.valid_to);
  const reopened = await admin.relations.reopen(relation.id);
  assert.equal(reopened.valid_to, null);
  assert.ok(Array.isArray((await admin.entityReviews.list({ limit: 5 })).items));
});
