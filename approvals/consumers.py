"""The approvals stream: queue rows, the dashboard's list and the navigation's pending count;
on a decision screen (`?approval=<id>`) also that approval's state and who has it open."""

import asyncio
import uuid
from contextlib import suppress

from agentkit.database import any_thread
from runs import events
from runs.consumers import GroupConsumer, send_html_or_json

from . import presence, stream_messages
from .models import Approval


class ApprovalsConsumer(GroupConsumer):
    """Approvals queue rows and the pending count in the navigation. A decision screen's
    socket also watches its approval: every (re)connect sends the card's current state (a
    decision made while the socket was down is shown at once), and its presence group tells
    it who else has the approval open."""

    group = events.APPROVALS_GROUP
    watching: str | None = None
    heartbeat: asyncio.Task | None = None

    async def send_current_state(self) -> None:
        if self.as_json:
            return
        self.watching = await any_thread(self._watch)()
        if self.watching:
            # Joined before the state is read: a decision committed in between still arrives.
            await self.channel_layer.group_add(
                events.approval_group(self.watching), self.channel_name
            )
        # A page rendered just before an approval was opened would miss its push and show a
        # stale count until the next change (a run launched from the form gates within ms).
        state = await any_thread(stream_messages.render_approval_event)(self.watching, self.agents)
        await send_html_or_json(self, state)
        if self.watching:
            await self._send_presence()
            await self.channel_layer.group_send(
                events.approval_group(self.watching), {"type": "presence.changed"}
            )
            self.heartbeat = asyncio.create_task(self._beat())

    def _watch(self) -> str | None:
        raw = self._query_value("approval")
        try:
            approval_id = uuid.UUID(raw) if raw else None
        except ValueError:
            return None
        user = self.scope["user"]
        if approval_id is None or not Approval.objects.visible_to(user).filter(pk=approval_id):
            return None
        presence.watch(approval_id, user, self.channel_name)
        return str(approval_id)

    def _query_value(self, name: str) -> str:
        from urllib.parse import parse_qs

        values = parse_qs(self.scope.get("query_string", b"").decode()).get(name)
        return values[-1] if values else ""

    async def _beat(self) -> None:
        while True:
            await asyncio.sleep(presence.HEARTBEAT.total_seconds())
            await any_thread(presence.refresh)(self.channel_name)

    def joined_groups(self) -> list[str]:
        groups = super().joined_groups()
        return [*groups, events.approval_group(self.watching)] if self.watching else groups

    async def stop_streaming(self) -> None:
        beat, self.heartbeat = self.heartbeat, None
        if beat is not None:
            beat.cancel()
            with suppress(asyncio.CancelledError):
                await beat

    async def disconnect(self, code):
        watching = self.watching
        await super().disconnect(code)
        if watching:
            await any_thread(_unwatch)(watching, self.channel_name)
            await self.channel_layer.group_send(
                events.approval_group(watching), {"type": "presence.changed"}
            )

    async def rendered(self, event: dict) -> dict:
        return await stream_messages.approval_payload(event, self.agents)

    async def approvals_changed(self, event):
        await self.forward(event)
        if self.watching and event.get("approval_id") == self.watching and not self.as_json:
            # Decided or expired: its claims are over and the claim button goes.
            await self._send_presence()

    async def presence_changed(self, event):
        if self.watching:
            await self._send_presence()

    async def _send_presence(self) -> None:
        html = await any_thread(stream_messages.render_presence)(self.watching, self.scope["user"])
        if html:
            await self.send(text_data=html)


def _unwatch(approval_id: str, channel_name: str) -> None:
    if presence.unwatch(channel_name):
        # A claim ended with its screen: the queue shows it no more.
        events.publish_approval(approval_id)
