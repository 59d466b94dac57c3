"""Dashboard round 2 (issue 11, items 6-11) through the Django client: what a first-time user reads."""

from __future__ import annotations

import csv
import io
import re
import uuid
from datetime import timedelta

from django.urls import reverse
from django.utils import timezone

from memory_admin.models import AuditEvent, Fact

HTMX = {"HTTP_HX_REQUEST": "true"}


def test_members_read_words_not_codes(member, tenant, memory_user, make_fact):
    make_fact(memory_user, "Alice seems to like jazz", source="agent_inferred")
    body = member.get(reverse("user_facts", args=[tenant.slug, memory_user.pk])).content.decode()
    assert "An assistant guessed it" in body
    shown = re.sub(r"<[^>]+>", " ", body)  # text, not attribute values (option values stay codes)
    for code in ("agent_inferred", "user_stated", "eviction queue", "SPEC"):
        assert code not in shown, code


def test_the_nav_marks_the_current_page_on_every_staff_page(admin, tenant, memory_user, make_fact):
    fact = make_fact(memory_user, "Alice prefers vim")
    expected = {
        reverse("overview", args=[tenant.slug]): "Overview",
        reverse("user_facts", args=[tenant.slug, memory_user.pk]): "Users",
        reverse("fact_detail", args=[tenant.slug, fact.pk]): "Users",
        reverse("eviction", args=[tenant.slug]): "Review",
        reverse("skills", args=[tenant.slug]): "Skills",
        reverse("batches", args=[tenant.slug]): "Extraction",
        reverse("pii", args=[tenant.slug]): "PII blocks",
        reverse("audit", args=[tenant.slug]): "Audit log",
        reverse("keys", args=[tenant.slug]): "Agents &amp; keys",
        reverse("settings", args=[tenant.slug]): "Settings",
        reverse("search", args=[tenant.slug]): "Search",
        reverse("conversations", args=[tenant.slug]): "Conversations",
        reverse("playground", args=[tenant.slug]): "Playground",
    }
    for url, label in expected.items():
        body = admin.get(url).content.decode()
        current = re.findall(r'<a href="[^"]*" aria-current="page">([^<]+)</a>', body.split("</nav>")[0])
        assert current == [label], (url, current)
        assert 'class="skip-link" href="#main"' in body


def test_diff_rows_are_single_spaced(operator, tenant, memory_user):
    from memory_admin.services.notebook import notebook_save  # noqa: F401 -- the page's own write path

    url = reverse("user_notebook", args=[tenant.slug, memory_user.pk])
    operator.post(url, {"content": "# Alice\n- tea", "base_version": "0", "save": "1"})
    operator.post(url, {"content": "# Alice\n- coffee", "base_version": "1", "save": "1"})
    body = operator.get(url + "?diff=2").content.decode()
    diff = body.split('<pre tabindex="0" class="diff">')[1].split("</pre>")[0]
    assert "\n" not in diff  # each line is a block span: a newline between them would add a blank line
    assert '<span class="d-add">+- coffee</span>' in diff


def test_the_audit_log_highlights_changes_offers_actions_and_exports_csv(auditor, tenant, memory_user):
    AuditEvent.objects.create(
        tenant=tenant,
        memory_user=memory_user,
        actor_type="staff",
        actor="staff:otto",
        action="fact.correct",
        outcome="updated",
        target_type="fact",
        target_id=str(uuid.uuid4()),
        before={"content": "Lives in Lyon", "version": 1, "category": "personal"},
        after={"content": "Lives in Paris", "version": 2, "category": "personal"},
    )
    url = reverse("audit", args=[tenant.slug])
    body = auditor.get(url).content.decode()
    assert "<summary>content, version</summary>" in body  # the changed fields, named
    assert re.search(r'<tr class="chg"><th scope="row">content', body)
    assert re.search(r'<tr class="same"><th scope="row">category', body)
    assert '<select name="action">' in body and '<option value="fact.correct"' in body
    r = auditor.get(reverse("audit_export", args=[tenant.slug]), {"action": "fact.correct"})
    rows = list(csv.DictReader(io.StringIO(b"".join(r.streaming_content).decode())))
    assert len(rows) == 1 and rows[0]["changed_fields"] == "content;version"
    assert "Lives in Paris" in rows[0]["after"] and "." not in rows[0]["created_at"]  # no microseconds


def test_settings_explain_units_ranges_and_meaning(admin, tenant):
    body = admin.get(reverse("settings", args=[tenant.slug])).content.decode()
    assert 'Extraction delay <span class="unit">(seconds)</span>' in body
    assert "Allowed: 0 to 86400." in body
    assert 'aria-describedby="help-fact_cap"' in body


def test_date_filters_take_iso_dates(auditor, tenant):
    body = auditor.get(reverse("pii", args=[tenant.slug])).content.decode()
    assert 'type="date"' not in body and 'placeholder="YYYY-MM-DD"' in body


def test_fact_detail_has_labels_version_order_contradiction_link_and_decay(
    operator, tenant, memory_user, make_contradiction
):
    item = make_contradiction(memory_user)
    fact = item.fact_a
    Fact.objects.filter(pk=fact.pk).update(created_at=timezone.now() - timedelta(days=40))
    body = operator.get(reverse("fact_detail", args=[tenant.slug, fact.pk])).content.decode()
    assert "<dt>Source</dt><dd>stated by the user</dd>" in body
    assert f'#c-{item.pk}">Open the contradiction in the review queue</a>' in body
    curve = body.split('id="decay"')[1].split("</section>")[0]
    assert "<polyline" in curve and 'class="future"' in curve
    assert "Being contested adds 0.3" in curve
    assert re.search(r"turns stale around <b>\d{4}-\d{2}-\d{2}</b>|It is stale now", curve)


def test_overview_range_click_through_and_numbers(operator, tenant, memory_user):
    AuditEvent.objects.create(
        tenant=tenant,
        memory_user=memory_user,
        actor_type="agent",
        actor="agent:x",
        action="fact.write",
        outcome="created",
        target_type="fact",
        target_id="",
    )
    body = operator.get(reverse("overview", args=[tenant.slug]), {"days": "30"}).content.decode()
    assert "last 30 days" in body and 'href="?days=30" aria-current="true"' in body
    today = timezone.localdate().isoformat()
    assert f"action=.write&amp;outcome=created&amp;since={today}&amp;until={today}" in body  # a bar opens its events
    assert "Show the numbers" in body and 'class="value">1</text>' in body
    assert "last 14 days" in operator.get(reverse("overview", args=[tenant.slug]), {"days": "999"}).content.decode()


def test_a_member_sees_you_for_their_own_notebook_revisions(member, tenant, memory_user):
    url = reverse("user_notebook", args=[tenant.slug, memory_user.pk])
    member.post(url, {"content": "# Me\n- tea", "base_version": "0", "save": "1"})
    body = member.get(url).content.decode()
    assert "<td>v1</td><td>you</td>" in body and f"staff:{member.username}" not in body


def test_a_resolution_can_be_undone_and_the_facts_are_as_they_were(operator, tenant, memory_user, make_contradiction):
    from memory_admin.models import Contradiction

    item = make_contradiction(memory_user)
    resolve = reverse("review_resolve", args=[tenant.slug, item.pk])
    reopen = reverse("review_reopen", args=[tenant.slug, item.pk])
    done = operator.post(resolve, {"action": "keep_b"}, **HTMX).content.decode()
    assert "Undo" in done and "reopen" in done
    card = operator.post(reopen, **HTMX).content.decode()
    assert "Reopened" in card and 'value="keep_a"' in card  # the card is open again, with its buttons
    item.refresh_from_db()
    a, b = Fact.objects.get(pk=item.fact_a_id), Fact.objects.get(pk=item.fact_b_id)
    assert item.status == "open" and item.resolution == ""
    assert (a.status, a.superseded_by_id, a.contested) == ("active", None, True) and b.contested
    again = operator.post(reopen, **HTMX).content.decode()
    assert "already open" in again
    operator.post(resolve, {"action": "merge", "merged_text": "Alice drinks tea and coffee"}, **HTMX)
    refused = operator.post(reopen, **HTMX).content.decode()
    assert "correct or forget that fact" in refused
    assert Contradiction.objects.get(pk=item.pk).status == "resolved"
    assert AuditEvent.objects.filter(action="contradiction.reopen", target_id=str(item.pk)).count() == 1
