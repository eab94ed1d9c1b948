from django.urls import path

from . import passkey_views, recovery_code_views, two_factor_views

app_name = "two_factor"
urlpatterns = [
    path("", two_factor_views.setup, name="setup"),
    path("start/", two_factor_views.start, name="start"),
    path("confirm/", two_factor_views.confirm, name="confirm"),
    path("remove/", two_factor_views.remove, name="remove"),
    path("verify/", two_factor_views.verify, name="verify"),
    path("recovery-codes/", recovery_code_views.regenerate, name="recovery_codes"),
    path("verify/recovery-code/", recovery_code_views.verify, name="verify_recovery_code"),
    path("keys/options/", passkey_views.register_options, name="key_options"),
    path("keys/", passkey_views.register, name="key_register"),
    path("keys/<int:pk>/remove/", passkey_views.remove, name="key_remove"),
    path("verify/key/options/", passkey_views.verify_options, name="verify_key_options"),
    path("verify/key/", passkey_views.verify, name="verify_key"),
]
