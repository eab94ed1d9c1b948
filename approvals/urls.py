from django.urls import path

from . import batch_views, delegation_views, one_tap_views, views

app_name = "approvals"
urlpatterns = [
    path("", views.queue, name="queue"),
    path("stats/", views.stats, name="stats"),
    path("batch/", batch_views.batch_decide, name="batch"),
    path("delegation/", delegation_views.delegations, name="delegations"),
    path("delegation/<int:pk>/end/", delegation_views.end_delegation, name="end_delegation"),
    path("<uuid:pk>/", views.detail, name="detail"),
    path("<uuid:pk>/opened/", views.opened, name="opened"),
    path("<uuid:pk>/decide/", views.decide, name="decide"),
    path("<uuid:pk>/edit-preview/", views.edit_preview, name="edit_preview"),
    path("link/<str:token>/", one_tap_views.one_tap_page, name="one_tap"),
]
