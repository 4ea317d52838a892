"""The installed stack a run records (titanflow.judge.environment.installed_stack): every importable distribution with
its version and one digest of the set, the system figures, each saying why where it cannot be read on this machine (a
CPU machine without Neuron), and the difference two stacks make (stack_difference)."""

import hashlib
import importlib.metadata
import time

from titanflow.judge.environment import installed_stack, stack_difference


def test_every_distribution_with_its_version_and_one_digest_of_the_set_in_well_under_a_second():
    started = time.perf_counter()
    stack = installed_stack()
    took = time.perf_counter() - started
    assert took < 1.0, f"{took:.2f} s"  # about 0.1-0.3 s here
    found = stack["distributions"]
    assert found["torch"] == importlib.metadata.version("torch") == "2.13.0+cpu"
    assert found["prefect"] == importlib.metadata.version("prefect") and "torchtitan" in found
    lines = "\n".join(f"{name}=={version}" for name, version in found.items())
    assert stack["digest"] == hashlib.sha256(lines.encode()).hexdigest()[:12] and list(found) == sorted(found)
    system = stack["system"]
    assert system["kernel"] and system["glibc"].startswith("glibc ")
    # no Neuron on this machine: each Neuron figure says why it is empty
    assert system["neuronx_cc"] == "not here: neuronx-cc is not on PATH"
    assert system["neuron_driver"].startswith("not here: no /sys/module/neuron/version")
    assert system["aws_neuronx_packages"].startswith("not here: ")
    assert all(value for value in system.values())


def test_the_difference_of_two_stacks_names_added_removed_and_changed_packages():
    before = {"distributions": {"prefect": "3.9.1", "torch": "2.13.0", "grain": "0.2.18"}}
    after = {"distributions": {"prefect": "3.9.0", "torch": "2.13.0", "etils": "1.15.0"}}
    assert stack_difference(before, after) == ["+etils 1.15.0", "-grain 0.2.18", "prefect 3.9.1 -> 3.9.0"]
    assert stack_difference(before, before) == [] and stack_difference(None, after) == []
