from django.apps import AppConfig


class HistoryConfig(AppConfig):
    name = "history"
    verbose_name = "Run history: fork, replay, export and import"
