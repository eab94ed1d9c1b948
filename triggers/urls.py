from django.urls import path

from . import views

app_name = "triggers"
urlpatterns = [
    path("schedules/", views.schedule_list, name="schedules"),
]
