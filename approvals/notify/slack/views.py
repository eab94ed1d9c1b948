"""Slack's interactivity endpoint (the Slack app's "Request URL"): button presses on approval
requests. approvals/notify/slack/app.py says what is done with them."""

from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from . import app as slack


# CSRF-exempt because Slack cannot hold our CSRF token: every request is authenticated by
# Slack's signature over the raw body instead (checked first, with its timestamp), and no
# cookie session is used: the presser is the Slack user the signed payload names.
@csrf_exempt
@require_POST
def slack_actions(request: HttpRequest) -> HttpResponse:
    if not slack.enabled():
        return HttpResponse("The Slack app is not configured.", status=404)
    if not slack.verify(request.body, request.headers):
        return HttpResponse("Bad or stale Slack signature.", status=401)
    payload = slack.parse(request.body)
    if payload is None:
        return HttpResponse("No interaction payload.", status=400)
    problem = slack.shape_error(payload)
    if problem:
        return HttpResponse(f"Not a Slack interaction payload: {problem}.", status=400)
    slack.handle_action(payload)
    # Slack wants a quick 200; what the presser is told goes to the response_url.
    return HttpResponse(status=200)
