from django.urls import path

from . import views
from .budgets import views as budget_views
from .compensation import views as compensation_views
from .steering import views as steering_views

app_name = "runs"
urlpatterns = [
    path("", views.dashboard, name="dashboard"),
    path("runs/", views.run_list, name="list"),
    path("runs/new/", views.run_new, name="new"),
    path("runs/<uuid:pk>/", views.run_detail, name="detail"),
    path("runs/<uuid:pk>/steps/", views.run_steps, name="steps"),
    path("runs/<uuid:pk>/steps/<int:seq>/", views.run_step, name="step"),
    path("runs/<uuid:pk>/cancel/", views.run_cancel, name="cancel"),
    path("runs/<uuid:pk>/actions/", views.run_actions, name="actions"),
    path("runs/<uuid:pk>/steer/", steering_views.run_steer, name="steer"),
    path("runs/<uuid:pk>/pause/", steering_views.run_pause, name="pause"),
    path("runs/<uuid:pk>/resume/", steering_views.run_resume, name="resume"),
    path("runs/<uuid:pk>/instructions/", steering_views.run_instruct, name="instruct"),
    path("runs/<uuid:pk>/recovery/", steering_views.run_recover, name="recover"),
    path("runs/<uuid:pk>/reopen/", steering_views.run_reopen, name="reopen"),
    path(
        "runs/<uuid:pk>/compensation/",
        compensation_views.run_compensation,
        name="compensation",
    ),
    path("runs/<uuid:pk>/compensate/", compensation_views.run_compensate, name="compensate"),
    path("runs/<uuid:pk>/pending/", views.run_pending, name="pending"),
    path("runs/<uuid:pk>/pending/<int:op_id>/", views.run_pending_finish, name="pending_finish"),
    path("runs/<uuid:pk>/export.<str:fmt>", views.run_export, name="export"),
    path("audit/", views.audit, name="audit"),
    path("budgets/", budget_views.budget_list, name="budgets"),
    path("budgets/<int:pk>/", budget_views.budget_edit, name="budget_edit"),
    path("budgets/<int:pk>/delete/", budget_views.budget_delete, name="budget_delete"),
    path("audit/runs/<uuid:pk>/", views.audit_run, name="audit_run"),
    # Browsers ask for /favicon.ico whatever the page says.
    path("favicon.ico", views.favicon),
]
