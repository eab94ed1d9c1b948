app_name = "approvals"
urlpatterns: list = []
