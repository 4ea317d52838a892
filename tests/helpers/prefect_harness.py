"""Reading a flow run's artifacts back, for tests that publish."""


def artifacts_of(flow_run_id) -> dict:
    """{key: artifact} of the flow run, read back through the Prefect client."""
    from prefect import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    with get_client(sync_client=True) as client:
        found = client.read_artifacts(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])))
    return {a.key: a for a in found}
