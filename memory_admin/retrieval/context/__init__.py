"""The context block (SPEC §6): what an agent is given about a user for one task, within a token budget.

Order: the user's notebook (always; it is sovereign), the tenant notebook, pinned facts, facts by
effective confidence and relevance to the task, document chunks the task is about (cited, within
KNOWLEDGE_CONTEXT_SHARE of the budget, marked when the notebook disagrees: `documents`), skills whose
path matches the task, recent episode summaries. Tokens are counted with tiktoken cl100k_base.

Facts fill the budget (issue 15), monotone by construction: pinned facts, then the search's ranking of
every candidate (one ranking, the same at every budget), with the related memory of the strongest
matches (the facts observed next to them: same thread, same episode, or within NEIGHBOUR_MINUTES; at
most RELATED_MAX_TOKENS) after the RELATED_AFTER best, form one order that does not depend on the
budget. A block is the longest prefix of that order that fits, and the next fact cut to fill what is
left (marked, and listed in the section's `truncated`): a larger budget only adds. Ranked facts are
rendered as the fill reaches them, from the columns the ranking statement carries. Tokens go to
content: facts are listed under one dated line per day, in
the order they were observed (a conversation reads in order); a fact carries a note only when it says
something (confidence below CONFIDENCE_NOTE_BELOW, contested, stale); a fact whose words another listed
fact already holds is collapsed into that line.

The block is fenced as data, and no content can pass for its structure (issue 8):
* the fence carries a random nonce drawn for each response (memory was stored before it was drawn, so it
  cannot contain it); the preamble says the closing marker has the same nonce;
* every line of stored text starts with "> " (notebooks, skills, facts) or is one "- [...] " line whose
  bracket is written by the block (pinned facts and facts with a note, the dates of facts, episodes):
  only the block's own headers start with "#", and only the fence starts with "<<<". A fact that itself
  starts with a bracket always gets the block's note first, so a plain quoted fact cannot pass for a
  noted one. Pinned facts keep a full note each (date, confidence): few, and chosen by people;
* runs of angle brackets in content, in any of their look-alike forms (fullwidth, guillemets, zero-width
  characters between them), are spaced out ("< < <"), so not even the folded text holds a fence;
  invisible characters are dropped and other line separators become line breaks (then prefixed);
* episode summaries that read as instructions to a model are withheld.

The same function serves the agent API and the dashboard's "what will the agent see?" preview.

Read top to bottom: `gather` (what could go in, in order), `fill` (what goes in, within the budget),
`render` (the lines and the fence).
"""

from __future__ import annotations

import time
from typing import Any

from memory_admin import metrics
from memory_admin.models import MemoryUser
from memory_admin.retrieval.context.fill import fit_sections
from memory_admin.retrieval.context.gather import gather_sections
from memory_admin.retrieval.context.render import FACT_SECTIONS, Section, final_text
from memory_admin.selectors.access import Principal
from memory_admin.services.access_counts import record_access, record_usage

MIN_BUDGET_TOKENS = 1
MAX_BUDGET_TOKENS = 32000


def _record_reads(principal: Principal, sections: list[Section], record: bool | None) -> None:
    """Reads of included facts count (services.access_counts); by default only agents' reads."""
    if not (principal.actor_type == "agent" if record is None else record):
        return

    record_access([i.id for s in sections if s.name in FACT_SECTIONS for i in s.included], principal, "context")
    record_usage(principal.tenant_id, "context")


def _section_out(section: Section) -> dict[str, Any]:
    return {
        "name": section.name,
        "tokens": section.tokens(),
        "included": [i.id for i in section.included],
        "related": [i.id for i in section.included if i.related],
        "truncated": section.truncated,
        "dropped": section.dropped,
        "contradicts_notebook": [i.id for i in section.included if i.id in section.contradicts_notebook],
    }


@metrics.observe_context
def context_block(
    *,
    principal: Principal,
    memory_user: MemoryUser,
    task: str,
    budget_tokens: int,
    record: bool | None = None,
) -> dict[str, Any]:
    """Assemble the context block for `memory_user` and `task` within `budget_tokens` (cl100k_base).

    Returns a plain dict: `text` (never more than `budget_tokens` tokens), `tokens`, and `sections`, each
    with its tokens, the ids included (`related`: those included as related memory) and the ids dropped
    with a reason (`over_budget`, or `duplicate` with the id of the fact whose line holds it). The user's
    notebook is never dropped silently: if it alone exceeds the budget it is truncated,
    `notebook_truncated` is true and a warning says so. Reads of included facts are counted
    (services.access_counts) when `record` is true; by default only agents' reads count, so a dashboard
    preview leaves memory as it was.
    """
    started = time.perf_counter()
    sections, ranking = gather_sections(principal, memory_user, task, budget_tokens)
    warnings: list[str] = []
    fit_sections(sections, ranking, budget_tokens, warnings)
    timings = {f"search_{name}": round(value, 3) for name, value in ranking.timings.items()}
    text, tokens = final_text(sections, budget_tokens)
    _record_reads(principal, sections, record)
    notebook = sections[0]
    timings["total_ms"] = round((time.perf_counter() - started) * 1000, 3)
    timings["server_ms_excluding_embed"] = round(timings["total_ms"] - timings.get("search_embed_ms", 0.0), 3)
    return {
        "user_id": memory_user.external_id,
        "task": task,
        "budget_tokens": budget_tokens,
        "tokens": tokens,
        "text": text,
        "notebook_truncated": bool(notebook.truncated or notebook.dropped),
        "warnings": warnings,
        # The entities section is listed when the task names an entity, the documents one when a chunk could go in.
        "sections": [_section_out(s) for s in sections if s.name not in ("entities", "documents") or s.items],
        "timings": timings,
    }
