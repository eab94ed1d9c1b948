from django.urls import path

from . import views

app_name = "history"
urlpatterns = [
    path("runs/<uuid:pk>/fork/<int:seq>/", views.fork_run, name="fork"),
    path("runs/<uuid:pk>/replay/", views.replay_run, name="replay"),
]
