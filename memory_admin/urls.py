from django.contrib.auth import views as auth_views
from django.urls import include, path

from memory_admin.api import api
from memory_admin.views import admin, auth, facts, lifecycle, notebooks, oversight, overview, review, skills, users

tenant_patterns = [
    path("", auth.tenant_home, name="tenant_home"),
    path("preview/", users.markdown_preview, name="markdown_preview"),
    path("overview/", overview.overview, name="overview"),
    path("users/", users.users, name="users"),
    path("users/<int:user_id>/", users.user_notebook, name="user"),
    path("users/<int:user_id>/notebook/", users.user_notebook, name="user_notebook"),
    path("users/<int:user_id>/notebook/restore/", users.notebook_restore_view, name="notebook_restore"),
    path("users/<int:user_id>/facts/", users.user_facts, name="user_facts"),
    path("users/<int:user_id>/episodes/", users.user_episodes, name="user_episodes"),
    path("users/<int:user_id>/context/", users.user_context, name="user_context"),
    path("users/<int:user_id>/asof/", users.user_asof, name="user_asof"),
    path("users/<int:user_id>/activity/", users.user_activity, name="user_activity"),
    path("facts/<uuid:fact_id>/", facts.fact_detail, name="fact_detail"),
    path("facts/<uuid:fact_id>/pin/", facts.fact_pin_view, name="fact_pin"),
    path("facts/<uuid:fact_id>/correct/", facts.fact_correct_view, name="fact_correct"),
    path("facts/<uuid:fact_id>/forget/", facts.fact_forget_view, name="fact_forget"),
    path("review/", review.review_queue, name="review"),
    path("review/bulk/", review.review_bulk, name="review_bulk"),
    path("review/<uuid:contradiction_id>/resolve/", review.review_resolve, name="review_resolve"),
    path("review/eviction/", review.eviction_queue, name="eviction"),
    path("review/quarantine/", review.quarantine_queue, name="quarantine"),
    path("review/<str:queue>/<uuid:fact_id>/<str:action>/", review.fact_queue_action, name="fact_queue_action"),
    path("lifecycle/", lifecycle.lifecycle, name="lifecycle"),
    path("lifecycle/gc/", lifecycle.lifecycle_gc_now, name="lifecycle_gc_now"),
    path("lifecycle/scan/", lifecycle.contradiction_scan_now, name="contradiction_scan_now"),
    path("notebook/", notebooks.tenant_notebook, name="tenant_notebook"),
    path("notebook/restore/", notebooks.tenant_notebook_restore, name="tenant_notebook_restore"),
    path("pii/", oversight.pii_list, name="pii"),
    path("pii/export.csv", oversight.pii_export, name="pii_export"),
    path("pii/<uuid:block_id>/", oversight.pii_detail, name="pii_detail"),
    path("audit/", oversight.audit_log, name="audit"),
    path("audit/export.csv", oversight.audit_export, name="audit_export"),
    path("skills/", skills.skills, name="skills"),
    path("skills/edit/", skills.skill_edit, name="skill_edit"),
    path("batches/", admin.batches, name="batches"),
    path("batches/<int:batch_id>/retry/", admin.batch_retry_view, name="batch_retry"),
    path("keys/", admin.keys, name="keys"),
    path("keys/<int:key_id>/revoke/", admin.key_revoke, name="key_revoke"),
    path("settings/", admin.settings_page, name="settings"),
]

urlpatterns = [
    path("api/v1/", api.urls),
    path("accounts/login/", auth_views.LoginView.as_view(template_name="dashboard/login.html",
                                                         redirect_authenticated_user=True), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(next_page="login"), name="logout"),
    path("", auth.home, name="home"),
    path("t/<slug:slug>/", include(tenant_patterns)),
]
