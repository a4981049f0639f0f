"""The task registry's suites match the suite names defined once, and the package's public names resolve."""

import pytest

import archpool.tasks as tasks
from archpool.errors import ConfigError
from archpool.names import SCORED_SUITES, SUITE_NAMES, TASK_SUITES
from archpool.tasks.registry import SUITES, TASKS, register_suite


def test_every_registered_suite_is_a_defined_task_suite():
    assert set(SUITES) == set(TASK_SUITES)
    assert set(SCORED_SUITES) <= set(TASK_SUITES) and set(TASK_SUITES) <= set(SUITE_NAMES)


def test_every_registered_task_is_in_a_defined_suite_and_every_suite_task_is_registered():
    in_suites = {t for members in SUITES.values() for t in members}
    assert in_suites <= set(TASKS)
    assert set(TASKS) <= in_suites, sorted(set(TASKS) - in_suites)


def test_a_suite_outside_the_defined_names_or_naming_unknown_tasks_is_refused():
    with pytest.raises(ConfigError, match="unknown task suite 'rulerr'"):
        register_suite("rulerr", ["vt"])
    with pytest.raises(ConfigError, match="registered twice"):
        register_suite("ruler", ["vt"])
    assert set(SUITES) == set(TASK_SUITES)


@pytest.mark.parametrize("name", tasks.__all__)
def test_public_names_resolve(name):
    assert getattr(tasks, name) is not None


def test_public_api_is_the_registry_the_catalogue_fills():
    assert tasks.TASKS is TASKS and tasks.SUITES is SUITES
    assert tasks.get_task("mqar").metric == "dense" and tasks.is_dense("mqar_chain")
    assert tasks.suite_tasks("ruler") == tasks.RULER_TASKS
