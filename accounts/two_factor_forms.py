"""The forms of the second step of a sign-in and of the security page."""

from django import forms


class CodeForm(forms.Form):
    code = forms.RegexField(
        regex=r"^[0-9]{6}$",
        max_length=6,
        strip=True,
        error_messages={
            "invalid": "Enter the 6-digit code your app shows.",
            "required": "Enter the 6-digit code your app shows.",
            "max_length": "Enter the 6-digit code your app shows.",
        },
        widget=forms.TextInput(
            attrs={"autocomplete": "one-time-code", "inputmode": "numeric", "autofocus": True}
        ),
    )


class RecoveryCodeForm(forms.Form):
    # "abcd-efgh" as shown, though people may type it upper case or without the dash.
    recovery_code = forms.RegexField(
        regex=r"^\s*[A-Za-z2-7]{4}[\s-]?[A-Za-z2-7]{4}\s*$",
        max_length=12,
        strip=True,
        error_messages={
            "invalid": "Enter one of your recovery codes, like abcd-efgh.",
            "required": "Enter one of your recovery codes, like abcd-efgh.",
            "max_length": "Enter one of your recovery codes, like abcd-efgh.",
        },
        widget=forms.TextInput(attrs={"autocomplete": "off", "spellcheck": "false"}),
    )
