from django.urls import path

from . import two_factor_views

app_name = "two_factor"
urlpatterns = [
    path("", two_factor_views.setup, name="setup"),
    path("start/", two_factor_views.start, name="start"),
    path("confirm/", two_factor_views.confirm, name="confirm"),
    path("remove/", two_factor_views.remove, name="remove"),
    path("verify/", two_factor_views.verify, name="verify"),
]
