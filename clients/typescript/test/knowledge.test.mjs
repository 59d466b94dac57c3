// Trained knowledge on the live server: an upload (multipart) becomes a source, crawl now, pause, resume,
// delete, and every refusal rejects with its own class and the server's code. No worker runs here, so a
// source stays at its first crawl ("running"); the Python client's tests read chunks after a real crawl.
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  AddressNotAllowed,
  citation,
  CrawlInProgress,
  Forbidden,
  Invalid,
  InvalidUrl,
  LimitTooHigh,
  NotFound,
  SourcePaused,
  UnsupportedFileType,
} from "../dist/index.js";
import { admin, mem, user } from "../testing/live.mjs";

const GUIDE = "# Runbook\n\n## Backups\n\nBackups run nightly at 02:00 UTC.\n";

test("an uploaded file becomes a source: crawl now, pause, resume, delete", async () => {
  const owner = user("kai");
  const file = new File([GUIDE], "runbook.md", { type: "text/markdown" });
  const source = await mem.knowledge.upload(file, { user_id: owner, name: "Ops runbook" });
  assert.deepEqual(
    [source.kind, source.name, source.location, source.user_id, source.state],
    ["file", "Ops runbook", "runbook.md", owner, "running"],
  );
  await assert.rejects(
    mem.knowledge.crawl(source.id),
    (error) => error instanceof CrawlInProgress && error.status === 409 && error.code === "crawl_in_progress",
  );
  // A Blob with a filename goes the same way; the list is newest first.
  const notes = await mem.knowledge.upload(new Blob(["The staging cluster lives in eu-west-1.\n"]), {
    filename: "notes.txt",
    user_id: owner,
  });
  const listed = await mem.knowledge.list({ user_id: owner });
  assert.deepEqual(
    listed.items.map((s) => s.id),
    [notes.id, source.id],
  );
  assert.equal((await mem.knowledge.get(source.id)).location, "runbook.md");

  assert.equal((await mem.knowledge.pause(source.id)).status, "paused");
  await assert.rejects(mem.knowledge.crawl(source.id), (error) => error instanceof SourcePaused);
  const resumed = await mem.knowledge.resume(source.id);
  assert.equal(resumed.status, "active");

  const deleted = await mem.knowledge.delete(source.id);
  assert.deepEqual([deleted.id, deleted.status], [source.id, "deleted"]);
  const after = await mem.knowledge.list({ user_id: owner });
  assert.deepEqual(
    after.items.map((s) => s.id),
    [notes.id],
  );
  const withDeleted = await mem.knowledge.list({ user_id: owner, include_deleted: true });
  assert.ok(withDeleted.items.some((s) => s.id === source.id));
  await assert.rejects(mem.knowledge.delete(source.id), NotFound);
  await assert.rejects(mem.knowledge.chunks("00000000-0000-4000-8000-000000000000"), NotFound);
});

test("every knowledge refusal rejects with its own class and the server's code", async () => {
  const owner = user("lou");
  await assert.rejects(
    mem.knowledge.upload(new Blob([new Uint8Array([0x4d, 0x5a, 0, 0])]), { filename: "tool.exe", user_id: owner }),
    (error) =>
      error instanceof UnsupportedFileType &&
      error instanceof Invalid &&
      error.status === 422 &&
      error.code === "unsupported_file_type" &&
      error.field === "file",
  );
  await assert.rejects(mem.knowledge.add("url", "ftp://example.com/handbook", { user_id: owner }), InvalidUrl);
  await assert.rejects(
    mem.knowledge.add("url", "http://10.1.2.3/wiki", { user_id: owner }),
    (error) => error instanceof AddressNotAllowed && error.code === "address_not_allowed",
  );
  await assert.rejects(
    admin.knowledge.add("site", "https://example.com/", { max_depth: 8 }),
    (error) => error instanceof LimitTooHigh && error.field === "max_depth" && error.limit === 5,
  );
  await assert.rejects(
    admin.knowledge.add("site", "https://example.com/", { max_depth: 11 }),
    (error) => error instanceof Invalid && error.code === "invalid",
  );
  await assert.rejects(mem.knowledge.upload(new Blob(["x"])), TypeError); // no name: no way to tell its type
  assert.equal((await mem.knowledge.list({ user_id: owner })).items.length, 0);
});

test("the knowledge switch is read by any key and changed by an admin's only", async () => {
  assert.deepEqual(await mem.knowledge.settings(), { ingestion_enabled: true });
  await assert.rejects(mem.knowledge.updateSettings({ ingestion_enabled: false }), Forbidden);
  // Setting it to the value it has changes nothing the other tests rely on.
  assert.deepEqual(await admin.knowledge.updateSettings({ ingestion_enabled: true }), { ingestion_enabled: true });
});

test("search takes kinds and names a chunk's citation", async () => {
  const owner = user("lia");
  await mem.facts.add(owner, "Lia restores the nightly backups", { source: "user_stated" });
  const facts = await mem.search(owner, "nightly backups", { kinds: "fact" });
  assert.deepEqual(facts.kinds, ["fact"]);
  assert.ok(facts.hits.length > 0 && facts.hits.every((h) => h.kind === "fact" && h.fact && h.chunk === null));
  await assert.rejects(
    mem.search(owner, "nightly backups", { kinds: "facts" }),
    (error) => error instanceof Invalid && error.code === "invalid" && error.field === "kinds",
  );
  const chunk = {
    id: "c",
    text: "Backups run nightly.",
    source_id: "s",
    source_name: "Ops runbook",
    document_id: "d",
    title: "Runbook",
    url: null,
    file: "runbook.md",
    section: "Runbook > Backups",
    fetched_at: "2026-11-27T00:00:00Z",
    version: 1,
  };
  assert.equal(citation(chunk), "Ops runbook, runbook.md \u00a7 Runbook > Backups");
  assert.equal(citation({ ...chunk, url: "https://wiki/ops", file: null, section: "" }), "Ops runbook, https://wiki/ops");
});
