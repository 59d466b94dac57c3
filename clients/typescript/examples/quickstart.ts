import { MemoryAdmin } from "memory-admin-client";
const mem = new MemoryAdmin({ baseUrl: "http://127.0.0.1:8000", apiKey: "mem_…" });
await mem.facts.add("dana", "Dana prefers neovim", { key: "preference.editor", source: "user_stated" });
const { hits } = await mem.search("dana", "which editor?"); // typed hits, with score components
const { text } = await mem.context("dana", { task: "set up my editor", budget_tokens: 800 });
