import pytest

from tests.support.fake_messages_api import FakeMessagesServer

API_KEY = "sk-ant-test-key"


@pytest.fixture
def fake_api(settings):
    """A fake Messages API on a free port, with the app's settings pointing at it."""
    with FakeMessagesServer(latency=0.01, hang_seconds=10) as server:
        settings.ANTHROPIC_API_KEY = API_KEY
        settings.ANTHROPIC_BASE_URL = server.base_url
        settings.AGENTOPS = {**settings.AGENTOPS, "LLM_TIMEOUT_SECONDS": 5.0}
        yield server
