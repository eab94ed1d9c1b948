from django.urls import path

from . import learning_views, views

app_name = "approvals"
urlpatterns = [
    path("", views.queue, name="queue"),
    path("stats/", views.stats, name="stats"),
    path("rules/", learning_views.rules, name="rules"),
    path("rules/<int:pk>/accept/", learning_views.accept_rule, name="accept_rule"),
    path("rules/<int:pk>/decline/", learning_views.decline_rule, name="decline_rule"),
    path("rules/<int:pk>/revoke/", learning_views.revoke_rule, name="revoke_rule"),
    path("overrides/<int:pk>/clear/", learning_views.clear_override, name="clear_override"),
    path("review/", learning_views.review_queue, name="review"),
    path("review/<int:pk>/", learning_views.review_call, name="review_call"),
    path("<uuid:pk>/", views.detail, name="detail"),
    path("<uuid:pk>/opened/", views.opened, name="opened"),
    path("<uuid:pk>/decide/", views.decide, name="decide"),
    path("<uuid:pk>/edit-preview/", views.edit_preview, name="edit_preview"),
]
