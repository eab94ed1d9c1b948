from django.urls import path

from . import views

app_name = "evals"
urlpatterns = [
    path("", views.datasets, name="datasets"),
    path("<int:pk>/", views.dataset, name="dataset"),
    path("<int:pk>/decisions/", views.add_decisions, name="add_decisions"),
    path("<int:pk>/cases/<int:case>/remove/", views.remove_case, name="remove_case"),
    path("<int:pk>/regression/", views.run_regression, name="run_regression"),
    path("approvals/<uuid:approval>/add/", views.add_approval, name="add_approval"),
    path("regression-runs/<int:pk>/", views.regression_run, name="regression_run"),
    path("regression-runs/<int:pk>/compare/", views.compare_runs, name="compare"),
]
