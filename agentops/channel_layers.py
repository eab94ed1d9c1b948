"""The embedded topology's channel layer."""

from channels.layers import InMemoryChannelLayer as ChannelsInMemoryChannelLayer


class InMemoryChannelLayer(ChannelsInMemoryChannelLayer):
    """channels' in-memory layer, with its `channel_capacity` patterns working: channels 4.3
    keeps them as given, uncompiled, and the first send to any channel then fails in
    `get_capacity` (the Redis layer compiles them). The gateway's listening channel needs
    one (settings.GATEWAY_HUB_CAPACITY)."""

    def __init__(self, **config):
        super().__init__(**config)
        self.channel_capacity = self.compile_capacities(self.channel_capacity)
