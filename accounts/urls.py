from django.urls import path

from . import team_views

app_name = "teams"
urlpatterns = [
    path("", team_views.team_list, name="list"),
    path("new/", team_views.team_edit, name="new"),
    path("<int:pk>/", team_views.team_edit, name="edit"),
    path("<int:pk>/delete/", team_views.team_delete, name="delete"),
]
