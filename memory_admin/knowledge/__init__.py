"""Trained knowledge (issue 34): documents and sites digested into screened, embedded chunks.

- `parsing`: what a document says (HTML, PDF, Markdown, text) as Markdown-shaped text and links;
- `chunking`: structure-aware chunks bounded in tokens;
- `digest`: screening (secret/PII scan, poisoning guard), batched embedding, superseding what changed;
- `fetch`: HTTP that refuses the private network (checked address pinned), size and time limits, robots.txt;
- `crawl`: the resumable walk over a source, a few documents per task;
- `services`: create, crawl now, pause/resume, delete, kill switch (audited);
- `selectors`: what the API shows of sources; `tasks`: the Celery tasks (bulk queue) and beat's sweep.
"""
