"""The approvals stream: queue rows, the dashboard's list and the navigation's pending count."""

from channels.db import database_sync_to_async

from runs import events
from runs.consumers import GroupConsumer, send_html_or_json

from . import live


class ApprovalsConsumer(GroupConsumer):
    """Approvals queue rows and the pending count in the navigation."""

    group = events.APPROVALS_GROUP

    async def send_current_state(self) -> None:
        # A page rendered just before an approval was opened would miss its push and show a
        # stale count until the next change (a run launched from the form gates within ms).
        if not self.as_json:
            state = await database_sync_to_async(live.render_approval_event)(None)
            await send_html_or_json(self, state)

    async def rendered(self, event: dict) -> dict:
        return await live.approval_payload(event)

    async def approvals_changed(self, event):
        await self.forward(event)
