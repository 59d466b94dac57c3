import { tool } from "ai";
import { z } from "zod";
import { citation, MemoryAdmin, WriteRefused } from "memory-admin-client";

const mem = new MemoryAdmin(); // MEMORY_ADMIN_URL and MEMORY_ADMIN_API_KEY from the environment

export function memoryTools(userId: string) {
  return {
    remember: tool({
      description: "Save one fact about the user for later conversations.",
      inputSchema: z.object({
        content: z.string().describe("One self-contained statement, e.g. 'Dana prefers neovim'"),
        key: z.string().optional().describe("A slot such as 'preference.editor': a new value replaces the old"),
      }),
      execute: async ({ content, key }) => {
        try {
          const { outcome, fact } = await mem.facts.add(userId, content, { key });
          return { saved: true, outcome, id: fact?.id };
        } catch (error) {
          // The write path kept it out of memory (low confidence, quarantined, ...): tell the model why.
          if (error instanceof WriteRefused) return { saved: false, outcome: error.outcome, reason: error.detail };
          throw error;
        }
      },
    }),
    recall: tool({
      description: "Search what is remembered about the user.",
      inputSchema: z.object({ query: z.string() }),
      execute: async ({ query }) => {
        const { hits } = await mem.search(userId, query, { k: 5 });
        // A fact, a past message of the user's conversations, or a document chunk with where it comes from
        // (a model can cite it): each hit names its `kind`.
        return hits.map((hit) =>
          hit.chunk
            ? { content: hit.chunk.text, source: citation(hit.chunk), score: hit.score.final }
            : hit.message
              ? { said: hit.message.text, at: hit.message.created_at, score: hit.score.final }
            : { id: hit.fact?.id, content: hit.fact?.content, score: hit.score.final },
        );
      },
    }),
  };
}
