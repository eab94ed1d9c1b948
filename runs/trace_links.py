"""The link from a run to its trace in the tracing back end (Tempo, Jaeger, Honeycomb, …):
AGENTOPS_TRACE_URL is a template such as `https://tempo.example/trace/{trace_id}`. Settings
refuse a template that is not http(s) at start-up; the check is made again here, so a link
is only ever an http(s) URL (the template escapes it where shown)."""

from urllib.parse import quote, urlsplit

from django.conf import settings

PLACEHOLDER = "{trace_id}"


def url_for(trace_id: str) -> str:
    """The trace's page, or "" when there is no trace id, no template or no valid URL."""
    template = settings.AGENTOPS.get("TRACE_URL") or ""
    if not trace_id or PLACEHOLDER not in template:
        return ""
    # str.replace, not format(): other braces in the template (a query's JSON) stay as they are.
    url = template.replace(PLACEHOLDER, quote(trace_id, safe=""))
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return ""
    return url
