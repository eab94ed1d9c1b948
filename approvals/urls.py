from django.urls import path

from . import batch_views, delegation_views, views
from .evidence import views as export_views
from .grants import views as grant_views
from .learning import views as learning_views
from .notify.one_tap import views as one_tap_views
from .plans import views as plan_views

app_name = "approvals"
urlpatterns = [
    path("", views.queue, name="queue"),
    path("stats/", learning_views.approver_stats, name="stats"),
    path("export/", export_views.decisions_export, name="decisions_export"),
    path("batch/", batch_views.batch_decide, name="batch"),
    path("delegation/", delegation_views.delegations, name="delegations"),
    path("delegation/<int:pk>/end/", delegation_views.end_delegation, name="end_delegation"),
    path("grants/", grant_views.grants_page, name="grants"),
    path("grants/<int:pk>/revoke/", grant_views.revoke_grant, name="revoke_grant"),
    path("rules/", learning_views.rules, name="rules"),
    path("rules/<int:pk>/accept/", learning_views.accept_rule, name="accept_rule"),
    path("rules/<int:pk>/decline/", learning_views.decline_rule, name="decline_rule"),
    path("rules/<int:pk>/revoke/", learning_views.revoke_rule, name="revoke_rule"),
    path("overrides/<int:pk>/clear/", learning_views.clear_override, name="clear_override"),
    path("review/", learning_views.review_queue, name="review"),
    path("review/<int:pk>/", learning_views.review_call, name="review_call"),
    path("<uuid:pk>/", views.detail, name="detail"),
    path("<uuid:pk>/plan/", plan_views.plan_screen, name="plan"),
    path("<uuid:pk>/plan/decide/", plan_views.decide_plan, name="decide_plan"),
    path("runs/<uuid:pk>/plan/", plan_views.run_plan, name="run_plan"),
    path("<uuid:pk>/opened/", views.opened, name="opened"),
    path("<uuid:pk>/decide/", views.decide, name="decide"),
    path("<uuid:pk>/claim/", views.claim, name="claim"),
    path("<uuid:pk>/grant/", grant_views.grant_from_card, name="grant"),
    path("<uuid:pk>/resume-halted/", grant_views.resume_halted, name="resume_halted"),
    path("<uuid:pk>/edit-preview/", views.edit_preview, name="edit_preview"),
    path("link/<str:token>/", one_tap_views.one_tap_page, name="one_tap"),
]
