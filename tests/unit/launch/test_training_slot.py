"""The node's training slot: a Prefect global concurrency limit created on first use, held while
training, and freed when a restarted server still counts it taken."""

from prefect.settings import PREFECT_API_URL, temporary_settings

from titanflow.launch.slot import SLOTS_PER_NODE, limit_name, release_stale_slots, training_slot


def _limit(client, name):
    return client.read_global_concurrency_limit_by_name(name)


def test_slot_is_created_held_and_released(prefect_api):
    from prefect.client.orchestration import get_client

    with temporary_settings({PREFECT_API_URL: prefect_api}), get_client(sync_client=True) as client:
        with training_slot("test-node-a") as name:
            assert name == limit_name("test-node-a") == "titanflow-train-test-node-a"
            held = _limit(client, name)
            assert (held.limit, held.active_slots) == (SLOTS_PER_NODE, 1)
        assert _limit(client, name).active_slots == 0


def test_stale_slot_left_by_a_stopped_server_is_freed(prefect_api):
    """What a server restarted after `make stop` during training finds: the count says taken, no run holds it."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import GlobalConcurrencyLimitUpdate

    with temporary_settings({PREFECT_API_URL: prefect_api}), get_client(sync_client=True) as client:
        with training_slot("test-node-b") as name:
            pass
        client.update_global_concurrency_limit(name, GlobalConcurrencyLimitUpdate(active_slots=1))
        assert name in release_stale_slots(prefect_api)
        assert _limit(client, name).active_slots == 0
        assert release_stale_slots(prefect_api) == []  # nothing left to free
