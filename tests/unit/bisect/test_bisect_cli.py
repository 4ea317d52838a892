"""titanflow bisect refuses what it cannot bisect before any Prefect server or probe starts (exit 2, the field
named), on a scratch repository."""

import pytest
from helpers.bisect_runs import chain, scratch_repo

from titanflow.cli import main


@pytest.fixture()
def repo(tmp_path):
    path = scratch_repo(tmp_path / "repo")
    chain(path, 2)
    return path


@pytest.mark.parametrize("argv, message", [
    (["--good", "v0", "--bad", "HEAD"], "good: 'v0' is not a commit of "),
    (["--good", "HEAD", "--bad", "HEAD~2"], "good: 'HEAD' ("),
    (["--good", "HEAD~2", "--bad", "HEAD", "--steps", "0"], "steps: Input should be greater than or equal to 1"),
    (["--good", "HEAD~2", "--bad", "HEAD", "--target", "tpu"], "target: unknown 'tpu'"),
    (["--good", "HEAD~2", "--bad", "HEAD", "--probe-timeout-s", "0"],
     "probe_timeout_s: 0.0 is not a number of seconds above 0; fix: pass one"),
    (["--good", "HEAD~2", "--bad", "HEAD", "--probe-timeout-s", "nan"], "probe_timeout_s: nan is not a number of seconds"),
    (["--good", "HEAD~2", "--bad", "HEAD", "--probe-timeout-s", "inf"], "probe_timeout_s: inf is not a number of seconds"),
    (["--good", "HEAD~2", "--bad", "HEAD", "--runs-dir", "/proc/titanflow-bisects"], "runs_dir: /proc/titanflow-bisects is "
                                                                                    "not writable"),
])
def test_bad_input_is_refused_naming_the_field(repo, capsys, argv, message):
    assert main(["bisect", "native", "--repo", str(repo), *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("titanflow: bad input:\n") and message in err


def test_a_folder_outside_git_is_refused(tmp_path, capsys):
    assert main(["bisect", "native", "--good", "a", "--bad", "b", "--repo", str(tmp_path)]) == 2
    assert f"repo: {tmp_path} is not a git checkout" in capsys.readouterr().err


def test_without_prefect_api_url_the_flow_gets_the_temporary_servers_url(monkeypatch):
    """titanflow bisect imports Prefect to check its input, before _with_api starts the temporary server: the call
    must still see that server's URL through Prefect's settings (the probes, processes of their own, report to it);
    it had read PREFECT_API_URL as unset and refused every bisect started without one."""
    from prefect.settings import PREFECT_API_URL

    from titanflow import cli

    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    reached, url = cli._with_api(lambda: PREFECT_API_URL.value())
    assert reached and url.startswith("http://127.0.0.1:") and url.endswith("/api")
    assert "PREFECT_API_URL" not in __import__("os").environ  # set for the call only
