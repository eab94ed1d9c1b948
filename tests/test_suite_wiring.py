"""The suite's own wiring (tests/conftest.py): what CI's services pass runs must exist, or a
renamed module would silently drop out of it."""

from tests.conftest import SERVICE_SENSITIVE, TESTS_DIR


def test_every_service_sensitive_module_exists():
    missing = sorted(m for m in SERVICE_SENSITIVE if not (TESTS_DIR / m).is_file())
    assert missing == []
