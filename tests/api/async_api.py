"""A NinjaAPI with an async state-changing operation, for tests/api/test_idempotency_async.py:
no async view of the product changes state today, and the mechanism must hold for one."""

from django.contrib.auth import get_user_model
from django.urls import path
from ninja import NinjaAPI, Schema, Status
from ninja.errors import HttpError

from agentops import idempotency

CALLS: list[dict] = []


async def by_header(request):
    return await get_user_model().objects.filter(username=request.headers.get("X-User")).afirst()


api = NinjaAPI(urls_namespace="idempotency-async-test", auth=[by_header])
idempotency.install(api)


class ThingIn(Schema):
    name: str


@api.post("/things", response={201: dict})
async def make_thing(request, payload: ThingIn):
    if payload.name == "fail":
        raise HttpError(503, "try again")
    CALLS.append({"name": payload.name})
    return Status(201, {"n": len(CALLS), "name": payload.name})


urlpatterns = [path("t/", api.urls)]
